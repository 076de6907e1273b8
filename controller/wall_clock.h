// Wall-clock time for persisted timestamps, behind a seam so the reconciler
// and its simulation run on a fake clock.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace controller {

class WallClock {
 public:
  virtual ~WallClock() = default;
  virtual int64_t NowMs() const = 0;
};

class SystemWallClock final : public WallClock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

// A clock that moves only when told to.
class FakeWallClock final : public WallClock {
 public:
  explicit FakeWallClock(int64_t start_ms = 1'000'000) : now_(start_ms) {}
  int64_t NowMs() const override { return now_.load(); }
  void Advance(int64_t ms) { now_ += ms; }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace controller
