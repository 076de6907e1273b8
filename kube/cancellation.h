// Ends requests in flight from another thread: an informer's Stop ends its
// blocked watch at once instead of waiting for the apiserver to close it.
#pragma once

#include <functional>
#include <list>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kube {

class Cancellation {
 public:
  using Waker = std::function<void()>;
  using Registration = std::list<Waker>::iterator;

  // From now on every request given this cancellation fails with Cancelled:
  // those in flight are woken to end now, later ones do not start.
  void Cancel();
  bool cancelled() const;

  // For the client: `wake` (thread-safe, quick) makes a request in flight
  // look at cancelled() now. False (nothing registered) when already
  // cancelled; a registration is undone with Unregister before the request's
  // state goes.
  bool Register(Waker wake, Registration& registration);
  void Unregister(Registration registration);

 private:
  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::list<Waker> wakers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kube
