// When to restart a dead child, and when to stop trying.
#pragma once

#include <deque>

#include "base/clock.h"

namespace supervisor {

struct RestartPolicyOptions {
  // Delay before the second restart of a crash streak; the first restart is
  // immediate because an isolated crash should cost no more than a re-exec.
  base::Duration initial_backoff{100};
  base::Duration max_backoff{5000};
  // A run at least this long ends the crash streak: the next death restarts at once.
  base::Duration stable_after{std::chrono::seconds(10)};
  // Deaths tolerated within death_window; one more and the supervisor gives up.
  int max_deaths = 5;
  base::Duration death_window{std::chrono::minutes(10)};
};

struct RestartDecision {
  bool give_up = false;
  base::Duration delay{0};
  // Deaths within the window, this one included.
  int deaths_in_window = 0;
};

class RestartPolicy {
 public:
  explicit RestartPolicy(RestartPolicyOptions options) : options_(options) {}

  void OnStart(base::TimePoint now) { last_start_ = now; }
  RestartDecision OnDeath(base::TimePoint now);
  // Deaths within the window that ends at `now`.
  int DeathsInWindow(base::TimePoint now) const;

  const RestartPolicyOptions& options() const { return options_; }

 private:
  bool InWindow(base::TimePoint death, base::TimePoint now) const {
    return now - death <= options_.death_window;
  }

  RestartPolicyOptions options_;
  std::deque<base::TimePoint> deaths_;
  base::TimePoint last_start_{};
  int streak_ = 0;
};

}  // namespace supervisor
