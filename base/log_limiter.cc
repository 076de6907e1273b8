#include "base/log_limiter.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace base {

LogLimiter::LogLimiter(Duration period, const TimeSource& clock) : period_(period), clock_(clock) {}

std::string LogLimiter::HeldBack(uint64_t count) {
  return count > 0 ? absl::StrCat(" (", count, " more since the last report)") : "";
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
