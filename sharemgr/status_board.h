// The published status of the share, readable from any thread. Writers are
// the supervisor loop; readers are RPC handlers and status streams, which
// wait for the next version instead of polling.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>

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
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  Status status_;
  bool closed_ = false;
};

}  // namespace sharemgr
