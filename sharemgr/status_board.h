// The published status of the share, readable from any thread. Writers are
// the supervisor loop; readers are RPC handlers and status streams, which
// wait for the next version instead of polling.
#pragma once

#include <chrono>
#include <functional>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sharemanager/v1/sharemanager.pb.h"

namespace sharemgr {

class StatusBoard {
 public:
  using Status = sharemanager::v1::ShareStatus;

  // Applies `edit`; when the status changed, bumps its version and wakes watchers.
  void Update(const std::function<void(Status&)>& edit);
  Status Snapshot() const;

  // Waits until a version newer than `after` exists, the deadline passes or
  // the board is closed. Returns the new status, or nothing.
  std::optional<Status> WaitNewer(uint64_t after,
                                  std::chrono::steady_clock::time_point deadline) const;

  // Wakes every waiter for good (shutdown).
  void Close();
  bool closed() const;

 private:
  mutable absl::Mutex mu_;
  Status status_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sharemgr
