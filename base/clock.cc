#include "base/clock.h"

#include <fmt/format.h>
#include <time.h>

#include <charconv>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace base {

const TimeSource& SteadyClock() {
  static const SteadyTimeSource clock;
  return clock;
}

TimePoint BootTimeSource::Now() const {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return TimePoint(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

const TimeSource& BootClock() {
  static const BootTimeSource clock;
  return clock;
}

std::string FormatDuration(Duration d) {
  const auto ms = d.count();
  if (ms < 1000) return fmt::format("{}ms", ms);
  if (ms < 60'000) return fmt::format("{:g}s", static_cast<double>(ms) / 1000.0);
  return fmt::format("{}m{}s", ms / 60'000, (ms % 60'000) / 1000);
}

absl::StatusOr<Duration> ParseDuration(std::string_view text) {
  std::string_view number = text;
  double scale_ms = 1000.0;
  if (text.ends_with("ms")) {
    number.remove_suffix(2);
    scale_ms = 1.0;
  } else if (text.ends_with("s")) {
    number.remove_suffix(1);
  } else if (text.ends_with("m")) {
    number.remove_suffix(1);
    scale_ms = 60'000.0;
  }
  // std::from_chars for double exists in libstdc++ 11+, unlike strtod it needs no NUL.
  double value = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size() ||
      !std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid duration '", std::string(text), "' (examples: 250ms, 3s, 1.5s, 2m)"));
  }
  const double ms = value * scale_ms;
  if (ms > 86'400'000.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("duration '", std::string(text), "' is over a day"));
  }
  return Duration(static_cast<int64_t>(std::llround(ms)));
}

absl::StatusOr<Duration> ParseFlagDuration(absl::string_view flag, std::string_view text,
                                           Duration min) {
  auto d = ParseDuration(text);
  if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", d.status().message()));
  if (*d < min) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " must be at least ", FormatDuration(min)));
  }
  return d;
}

}  // namespace base
