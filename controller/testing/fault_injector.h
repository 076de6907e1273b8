// Decides, call by call, whether a wrapped dependency fails: on a schedule
// ("fail the k-th call") or at random from a seed, so every failure can be
// replayed. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace controller {

enum class Fault {
  kNone,
  kFail,           // the call fails (UNAVAILABLE) without taking effect
  kTimeoutBefore,  // DEADLINE_EXCEEDED without taking effect
  kTimeoutAfter,   // takes effect, then DEADLINE_EXCEEDED: the caller cannot tell
  kDelay,          // takes effect after a delay
};

class FaultInjector {
 public:
  // Scheduled fault for the k-th call (1-based) from now on.
  void FailCall(uint64_t k, Fault fault);
  // Each call fails with `probability`, choosing uniformly among kFail,
  // kTimeoutBefore and kTimeoutAfter; deterministic for a seed.
  void Randomize(uint64_t seed, double probability);
  void SetDelay(std::chrono::milliseconds delay);
  void Disable();

  // Called once per wrapped call.
  Fault Next();
  uint64_t calls() const;
  // How many calls got a fault so far.
  uint64_t fired() const;
  std::chrono::milliseconds delay() const;

  // The error a fault returns, naming the operation.
  static absl::Status Error(Fault fault, const std::string& operation);

 private:
  mutable absl::Mutex mu_;
  uint64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t fired_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Fault> scheduled_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  double probability_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::milliseconds delay_ ABSL_GUARDED_BY(mu_){0};
};

// Runs `call` under the next fault: the shared body of every faulty wrapper.
template <typename T, typename Call>
T WithFault(FaultInjector& faults, const std::string& operation, Call call) {
  const Fault fault = faults.Next();
  switch (fault) {
    case Fault::kNone:
      return call();
    case Fault::kFail:
    case Fault::kTimeoutBefore:
      return FaultInjector::Error(fault, operation);
    case Fault::kTimeoutAfter: {
      T result = call();
      (void)result;
      return FaultInjector::Error(fault, operation);
    }
    case Fault::kDelay:
      std::this_thread::sleep_for(faults.delay());
      return call();
  }
  return call();
}

}  // namespace controller
