// When to restart a dead child, and when to stop trying.
#pragma once

#include <deque>

#include "supervisor/clock.h"

namespace supervisor {

struct RestartPolicyOptions {
  // Delay before the second restart of a crash streak; the first restart is
  // immediate because an isolated crash should cost no more than a re-exec.
  Duration initial_backoff{100};
  Duration max_backoff{5000};
  // A run at least this long ends the crash streak: the next death restarts at once.
  Duration stable_after{std::chrono::seconds(10)};
  // Deaths tolerated within death_window; one more and the supervisor gives up.
  int max_deaths = 5;
  Duration death_window{std::chrono::minutes(10)};
};

struct RestartDecision {
  bool give_up = false;
  Duration delay{0};
  // Deaths within the window, this one included.
  int deaths_in_window = 0;
};

class RestartPolicy {
 public:
  explicit RestartPolicy(RestartPolicyOptions options) : options_(options) {}

  void OnStart(TimePoint now) { last_start_ = now; }
  RestartDecision OnDeath(TimePoint now);

  const RestartPolicyOptions& options() const { return options_; }

 private:
  RestartPolicyOptions options_;
  std::deque<TimePoint> deaths_;
  TimePoint last_start_{};
  int streak_ = 0;
};

}  // namespace supervisor
