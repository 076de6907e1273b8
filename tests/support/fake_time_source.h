// A monotonic clock for tests that moves only when told to (base::TimeSource
// seam): timing logic is checked step by step, never against real time.
#pragma once

#include <atomic>

#include "base/clock.h"

namespace testing_support {

class FakeTimeSource final : public base::TimeSource {
 public:
  explicit FakeTimeSource(base::TimePoint start = base::TimePoint(std::chrono::hours(1)))
      : now_(start) {}
  base::TimePoint Now() const override { return now_.load(); }
  // Time never runs backwards: a point before now moves nothing.
  void AdvanceTo(base::TimePoint t) {
    base::TimePoint now = now_.load();
    while (t > now && !now_.compare_exchange_weak(now, t)) {
    }
  }
  void Advance(base::Duration d) { AdvanceTo(Now() + d); }

 private:
  std::atomic<base::TimePoint> now_;
};

}  // namespace testing_support
