#include "kube/backoff.h"

#include <algorithm>

namespace kube {

Backoff::Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max)
    : initial_(initial), max_(std::max(initial, max)), current_(initial) {}

std::chrono::milliseconds Backoff::Next() {
  const auto ceiling = current_;
  current_ = std::min(current_ * 2, max_);
  const auto floor = ceiling / 2;
  return std::chrono::milliseconds(
      absl::Uniform<int64_t>(absl::IntervalClosed, random_, floor.count(), ceiling.count()));
}

}  // namespace kube
