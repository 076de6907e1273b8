// Polls a condition until it holds or the timeout passes: tests wait for what
// they need, never for a fixed sleep.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace testing_support {

inline bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

}  // namespace testing_support
