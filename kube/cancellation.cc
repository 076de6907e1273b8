#include "kube/cancellation.h"

#include <utility>

namespace kube {

void Cancellation::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  // Under the lock: a request cannot unregister (and free what its waker
  // touches) while it is being woken.
  for (const auto& wake : wakers_) wake();
}

bool Cancellation::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

bool Cancellation::Register(Waker wake, Registration& registration) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return false;
  registration = wakers_.insert(wakers_.end(), std::move(wake));
  return true;
}

void Cancellation::Unregister(Registration registration) {
  absl::MutexLock lock(&mu_);
  wakers_.erase(registration);
}

}  // namespace kube
