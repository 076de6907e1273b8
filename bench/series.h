// Latency samples of one measure across benchmark runs, reported as a Markdown
// row: median, 90th percentile, max, and how many runs never got there.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace bench {

using Clock = std::chrono::steady_clock;

inline double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Series {
  explicit Series(std::string n) : name(std::move(n)) {}

  // The time from `start` to `at`, or a miss when it never happened.
  void Record(Clock::time_point start, std::optional<Clock::time_point> at) {
    if (at) {
      values.push_back(Ms(*at - start));
    } else {
      ++misses;
    }
  }

  std::string Row() const {
    if (values.empty()) return absl::StrFormat("| %s | - | - | - | %d |", name, misses);
    auto v = values;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    const double p90 = v[(n * 9 + 9) / 10 - 1];  // nearest rank: 9 in 10 runs took no longer
    return absl::StrFormat("| %s | %.1f ms | %.1f ms | %.1f ms | %d |", name, median, p90, v.back(),
                           misses);
  }

  static constexpr const char* kHeader =
      "| measure | median | p90 | max | runs that never got there |\n|---|---|---|---|---|\n";

  std::string name;
  std::vector<double> values;  // milliseconds
  int misses = 0;
};

}  // namespace bench
