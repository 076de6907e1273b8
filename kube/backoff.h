// How long to wait before retrying what keeps failing: doubling from
// `initial` up to `max`, each wait drawn at random from its upper half so
// that many clients failing together (an apiserver restart) do not retry in
// step.
#pragma once

#include <chrono>

#include "absl/random/random.h"

namespace kube {

class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max);

  // The wait before the next attempt; each call doubles the next one.
  std::chrono::milliseconds Next();
  // It worked: the next failure waits `initial` again.
  void Reset() { current_ = initial_; }

 private:
  const std::chrono::milliseconds initial_;
  const std::chrono::milliseconds max_;
  std::chrono::milliseconds current_;
  absl::BitGen random_;
};

}  // namespace kube
