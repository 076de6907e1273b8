// sharemanager.v1.ShareManager over gRPC: small adapters that check the epoch,
// bound the call by the caller's deadline, and hand the work to the supervisor
// loop. Reads come from the StatusBoard and never touch the loop.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "sharemanager/v1/sharemanager.grpc.pb.h"
#include "sharemgr/status_board.h"
#include "sharemgr/volume.h"

namespace sharemgr {

// Mutations the service forwards; each runs on the supervisor loop.
struct ShareCommands {
  // Runs `task` on the loop thread.
  std::function<void(std::function<void()> task)> post;
  // Loop-thread operations.
  std::function<absl::StatusOr<uint64_t>(uint64_t generation)> mount;
  std::function<absl::Status()> unmount;
  // Filled into every status as it is sent (uptimes are always added). Optional.
  std::function<void(sharemanager::v1::ShareStatus&)> live_fields;
  // Volume operations, run by the volume's owner one at a time; each waits
  // for its turn until the deadline and is refused at once in a state where
  // it cannot run (preparing, repairing, failed, stopping).
  using Deadline = std::chrono::system_clock::time_point;
  // Empty when the share has no block device (the RPCs answer UNIMPLEMENTED).
  std::function<absl::StatusOr<uint64_t>(Deadline)> trim;
  std::function<absl::StatusOr<ResizeResult>(Deadline)> resize;
  // Mount: the volume (re)mounted, or a directory share's directory created
  // when missing, before re-exporting.
  std::function<absl::Status(Deadline)> attach_volume;
  // Unmount: whether the volume can be released now (checked before the export
  // is withdrawn), then released once it is. Empty for a directory share.
  std::function<absl::Status()> can_release_volume;
  std::function<absl::Status(Deadline)> release_volume;
};

// The fence every mutating call must pass, and what callers may make the
// service spend: beyond a cap a call is refused with RESOURCE_EXHAUSTED at
// once, so gRPC's handler threads (also the health service's) never run out.
struct ShareServiceLimits {
  // A mutating call must carry exactly this epoch. 0: unfenced (no --epoch
  // given): calls without an epoch pass, one carrying an epoch is refused (its
  // sender believes in a fence that is not there). Otherwise 0 (unset) is
  // refused like any other.
  uint64_t epoch = 0;
  // The handler waits for a trim or resize at most this long, whatever
  // deadline the caller sent (the trim's work stops by then too:
  // VolumeOwnerOptions::max_op_time, the same flag).
  std::chrono::system_clock::duration max_volume_op_time = std::chrono::minutes(10);
  int max_watch_streams = 64;
  // Mutating calls in progress at once (each may wait for the loop or the volume).
  int max_changes = 8;
  // Changes handed to the supervisor loop and not run yet. A caller that gives
  // up at its deadline leaves its task queued: without this bound, changes
  // sent faster than a slow loop runs them would grow its queue for ever.
  int max_queued_changes = 64;
};

// A counted resource: a slot is taken by TryTake() and given back by the
// returned guard, which may outlive the CallSlots (a task still queued on the
// loop when the service is gone). Any thread.
class CallSlots {
 public:
  explicit CallSlots(int capacity) : free_(std::make_shared<std::atomic<int>>(capacity)) {}
  class Slot {
   public:
    explicit Slot(std::shared_ptr<std::atomic<int>> free) : free_(std::move(free)) {}
    Slot(Slot&& other) noexcept = default;
    Slot& operator=(Slot&&) = delete;
    ~Slot() {
      if (free_) free_->fetch_add(1);
    }

   private:
    std::shared_ptr<std::atomic<int>> free_;
  };
  std::optional<Slot> TryTake();

 private:
  std::shared_ptr<std::atomic<int>> free_;
};

class ShareService final : public sharemanager::v1::ShareManager::Service {
 public:
  ShareService(StatusBoard& board, ShareCommands commands, ShareServiceLimits limits);

  uint64_t epoch() const { return limits_.epoch; }

  grpc::Status Mount(grpc::ServerContext* context, const sharemanager::v1::MountRequest* request,
                     sharemanager::v1::MountResponse* response) override;
  grpc::Status Unmount(grpc::ServerContext* context,
                       const sharemanager::v1::UnmountRequest* request,
                       sharemanager::v1::UnmountResponse* response) override;
  grpc::Status GetStatus(grpc::ServerContext* context,
                         const sharemanager::v1::GetStatusRequest* request,
                         sharemanager::v1::ShareStatus* response) override;
  grpc::Status WatchStatus(grpc::ServerContext* context,
                           const sharemanager::v1::WatchStatusRequest* request,
                           grpc::ServerWriter<sharemanager::v1::ShareStatus>* writer) override;
  grpc::Status FilesystemTrim(grpc::ServerContext* context,
                              const sharemanager::v1::FilesystemTrimRequest* request,
                              sharemanager::v1::FilesystemTrimResponse* response) override;
  grpc::Status FilesystemResize(grpc::ServerContext* context,
                                const sharemanager::v1::FilesystemResizeRequest* request,
                                sharemanager::v1::FilesystemResizeResponse* response) override;

 private:
  absl::Status CheckEpoch(uint64_t requested) const;
  // Runs `op` on the loop and waits for it until the caller's deadline (capped).
  // The result is shared with the task, which may finish after the caller gave up.
  absl::StatusOr<uint64_t> RunOnLoop(grpc::ServerContext* context,
                                     std::function<absl::StatusOr<uint64_t>()> op);
  sharemanager::v1::ShareStatus Current() const;
  void Decorate(sharemanager::v1::ShareStatus& status) const;

  // Takes a mutation slot and checks the epoch: the common door of every
  // mutating call. RESOURCE_EXHAUSTED or FAILED_PRECONDITION when refused.
  absl::StatusOr<CallSlots::Slot> AdmitMutation(uint64_t requested_epoch);

  StatusBoard& board_;
  ShareCommands commands_;
  const ShareServiceLimits limits_;
  CallSlots mutations_;
  CallSlots watch_streams_;
  CallSlots queued_changes_;  // tasks on the loop, run or not
};

// Fills the derived fields (uptimes) of a status at the time it is sent.
void FillUptimes(sharemanager::v1::ShareStatus& status);

}  // namespace sharemgr
