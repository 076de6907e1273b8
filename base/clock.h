// Time source seam: production uses the steady clock, tests drive a fake one.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace base {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Duration = std::chrono::milliseconds;

class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual TimePoint Now() const = 0;
};

class SteadyTimeSource final : public TimeSource {
 public:
  TimePoint Now() const override { return Clock::now(); }
};

// One SteadyTimeSource for the whole process, for what takes a clock only so
// that tests can drive it.
const TimeSource& SteadyClock();

// CLOCK_BOOTTIME as a TimePoint: monotonic like the steady clock
// (CLOCK_MONOTONIC), but it keeps counting while the machine is suspended.
// For deadlines that run in real time whatever the machine does, such as the
// serving lease: etcd's clock does not stop while this machine sleeps, so a
// lease that ran out during a suspend must be over on wake-up. Its points are
// comparable only with its own (not with SteadyClock's).
class BootTimeSource final : public TimeSource {
 public:
  TimePoint Now() const override;
};
const TimeSource& BootClock();

// Formats a duration for logs and errors, e.g. "250ms", "3.5s", "10m0s".
std::string FormatDuration(Duration d);

// Parses "250ms", "3s", "1.5s", "2m" or a bare number of seconds. Rejects
// negatives, other units and values over a day.
absl::StatusOr<Duration> ParseDuration(std::string_view text);

// A flag's duration: ParseDuration, its error prefixed "FLAG: ", and one
// under `min` refused as "FLAG must be at least MIN".
absl::StatusOr<Duration> ParseFlagDuration(absl::string_view flag, std::string_view text,
                                           Duration min = Duration(0));

}  // namespace base
