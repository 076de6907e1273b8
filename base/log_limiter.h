// Logs an outsider can trigger as often as it likes (a refused TLS client, a
// probe that cannot even open a socket while something floods our ports) are
// kept at a bounded rate: the first one at once, then at most one per period,
// saying how many were held back meanwhile. Any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"

namespace base {

class LogLimiter {
 public:
  // `clock` must outlive the limiter (the steady clock unless a test drives one).
  explicit LogLimiter(Duration period, const TimeSource& clock = SteadyClock());

  // nullopt: hold this one back. Otherwise log it now; the value is how many
  // were held back since the last one logged.
  std::optional<uint64_t> Admit() ABSL_LOCKS_EXCLUDED(mu_);

  // What to append to the line Admit let through: " (N more since the last
  // report)", or nothing when none was held back.
  static std::string HeldBack(uint64_t count);

 private:
  const Duration period_;
  const TimeSource& clock_;
  absl::Mutex mu_;
  std::optional<TimePoint> last_logged_ ABSL_GUARDED_BY(mu_);
  uint64_t held_back_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace base
