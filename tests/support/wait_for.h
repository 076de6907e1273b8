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

// A negative wait that is the assertion itself ("N probe intervals later,
// nothing happened"): checks `holds` every 20 ms for the whole `window` and
// returns false at the first time it does not, instead of sleeping through
// the window and looking once at its end.
inline bool HoldsFor(const std::function<bool()>& holds, std::chrono::milliseconds window) {
  const auto end = std::chrono::steady_clock::now() + window;
  while (std::chrono::steady_clock::now() < end) {
    if (!holds()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return holds();
}

}  // namespace testing_support
