#include "base/byte_size.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace base {

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  // Longest suffixes first: "Mi" before "M".
  static constexpr std::array<std::pair<std::string_view, double>, 8> kSuffixes = {{
      {"Ki", 1024.0},
      {"Mi", 1024.0 * 1024},
      {"Gi", 1024.0 * 1024 * 1024},
      {"Ti", 1024.0 * 1024 * 1024 * 1024},
      {"k", 1e3},
      {"M", 1e6},
      {"G", 1e9},
      {"T", 1e12},
  }};
  std::string_view number = text;
  double scale = 1;
  for (const auto& [suffix, factor] : kSuffixes) {
    if (number.ends_with(suffix)) {
      number.remove_suffix(suffix.size());
      scale = factor;
      break;
    }
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size() ||
      !std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat("invalid size '", std::string(text),
                                                   "' (examples: 536870912, 512Mi, 1Gi, 300M)"));
  }
  const double bytes = std::round(value * scale);
  if (bytes >= 9.223372036854775808e18) {
    return absl::InvalidArgumentError(absl::StrCat("size '", std::string(text), "' is too large"));
  }
  return static_cast<uint64_t>(bytes);
}

std::string FormatBytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  static constexpr std::array<const char*, 6> kUnits = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1023.95 && unit + 1 < kUnits.size()) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

}  // namespace base
