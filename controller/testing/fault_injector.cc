#include "controller/testing/fault_injector.h"

#include "absl/strings/str_cat.h"

namespace controller {

void FaultInjector::FailCall(uint64_t k, Fault fault) {
  absl::MutexLock lock(&mu_);
  scheduled_[calls_ + k] = fault;
}

void FaultInjector::Randomize(uint64_t seed, double probability) {
  absl::MutexLock lock(&mu_);
  rng_.seed(seed);
  probability_ = probability;
}

void FaultInjector::SetDelay(std::chrono::milliseconds delay) {
  absl::MutexLock lock(&mu_);
  delay_ = delay;
}

void FaultInjector::Disable() {
  absl::MutexLock lock(&mu_);
  scheduled_.clear();
  probability_ = 0;
}

uint64_t FaultInjector::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

uint64_t FaultInjector::fired() const {
  absl::MutexLock lock(&mu_);
  return fired_;
}

std::chrono::milliseconds FaultInjector::delay() const {
  absl::MutexLock lock(&mu_);
  return delay_;
}

Fault FaultInjector::Next() {
  absl::MutexLock lock(&mu_);
  ++calls_;
  if (auto it = scheduled_.find(calls_); it != scheduled_.end()) {
    const Fault fault = it->second;
    scheduled_.erase(it);
    if (fault != Fault::kNone) ++fired_;
    return fault;
  }
  if (probability_ > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < probability_) {
    static constexpr Fault kRandom[] = {Fault::kFail, Fault::kTimeoutBefore, Fault::kTimeoutAfter};
    ++fired_;
    return kRandom[std::uniform_int_distribution<int>(0, 2)(rng_)];
  }
  return Fault::kNone;
}

absl::Status FaultInjector::Error(Fault fault, const std::string& operation) {
  if (fault == Fault::kFail)
    return absl::UnavailableError(absl::StrCat("injected failure: ", operation));
  return absl::DeadlineExceededError(absl::StrCat("injected timeout: ", operation));
}

}  // namespace controller
