#include "base/log_limiter.h"

#include <utility>

namespace base {

LogLimiter::LogLimiter(Duration period, const TimeSource& clock) : period_(period), clock_(clock) {}

const TimeSource& LogLimiter::SteadyClock() {
  static const SteadyTimeSource clock;
  return clock;
}

std::optional<uint64_t> LogLimiter::Admit() {
  const TimePoint now = clock_.Now();
  absl::MutexLock lock(&mu_);
  if (last_logged_ && now - *last_logged_ < period_) {
    ++held_back_;
    return std::nullopt;
  }
  last_logged_ = now;
  return std::exchange(held_back_, 0);
}

}  // namespace base
