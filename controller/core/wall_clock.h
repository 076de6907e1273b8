// The controller's two clocks, behind seams so the reconciler and its
// simulation run on fake ones:
//  - WallClock: unix time, only for stamps persisted for display (a
//    condition's lastTransitionTime, when a pod was created). It may step
//    either way (NTP, an operator), so no decision is ever taken on it.
//  - MonotonicClock: every duration the reconciler measures (grace, start
//    timeout, remount delay, backoffs, budgets). Meaningful only within one
//    process: never persisted.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace controller {

class WallClock {
 public:
  virtual ~WallClock() = default;
  virtual int64_t NowMs() const = 0;
};

class MonotonicClock {
 public:
  virtual ~MonotonicClock() = default;
  virtual int64_t MonotonicMs() const = 0;
};

class SystemWallClock final : public WallClock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

class SteadyMonotonicClock final : public MonotonicClock {
 public:
  int64_t MonotonicMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

// Both clocks, moving only when told to: Advance moves time (both clocks),
// StepWall moves only the wall clock, either way, as NTP or an operator may.
class FakeWallClock final : public WallClock, public MonotonicClock {
 public:
  explicit FakeWallClock(int64_t start_ms = 1'000'000) : wall_(start_ms), mono_(start_ms) {}
  int64_t NowMs() const override { return wall_.load(); }
  int64_t MonotonicMs() const override { return mono_.load(); }
  // Time passes; it never runs backwards (a negative step moves nothing).
  void Advance(int64_t ms) {
    ms = std::max<int64_t>(ms, 0);
    wall_ += ms;
    mono_ += ms;
  }
  void StepWall(int64_t ms) { wall_ += ms; }

 private:
  std::atomic<int64_t> wall_;
  std::atomic<int64_t> mono_;
};

}  // namespace controller
