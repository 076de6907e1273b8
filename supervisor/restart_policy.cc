#include "supervisor/restart_policy.h"

#include <algorithm>

namespace supervisor {

RestartDecision RestartPolicy::OnDeath(base::TimePoint now) {
  deaths_.push_back(now);
  while (!deaths_.empty() && !InWindow(deaths_.front(), now)) deaths_.pop_front();

  if (now - last_start_ >= options_.stable_after) streak_ = 0;
  RestartDecision decision;
  decision.deaths_in_window = static_cast<int>(deaths_.size());
  decision.give_up = decision.deaths_in_window > options_.max_deaths;
  if (streak_ > 0) {
    base::Duration delay = options_.initial_backoff;
    for (int i = 1; i < streak_ && delay < options_.max_backoff; ++i) delay *= 2;
    decision.delay = std::min(delay, options_.max_backoff);
  }
  ++streak_;
  return decision;
}

int RestartPolicy::DeathsInWindow(base::TimePoint now) const {
  return static_cast<int>(
      std::count_if(deaths_.begin(), deaths_.end(), [&](auto d) { return InWindow(d, now); }));
}

}  // namespace supervisor
