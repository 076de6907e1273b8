#include "sharemgr/share_service.h"

#include <future>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/grpc_status.h"

namespace sharemgr {
namespace {

using sharemanager::v1::ShareState;
using sharemanager::v1::ShareStatus;
using SystemClock = std::chrono::system_clock;

// No mutation may hold a handler longer than this, whatever deadline the caller sent.
constexpr auto kMaxCommandTime = std::chrono::seconds(10);
// Streams and waiting handlers re-check for cancellation (or a closing board)
// this often; changes wake them at once.
constexpr auto kStreamCancelCheck = std::chrono::milliseconds(250);

ShareCommands::Deadline CallerDeadline(const grpc::ServerContext* context,
                                       std::chrono::system_clock::duration cap) {
  return std::min(context->deadline(), SystemClock::now() + cap);
}

template <typename T>
absl::StatusOr<T> NeedsDevice(const std::function<absl::StatusOr<T>(ShareCommands::Deadline)>& op,
                              const char* what, ShareCommands::Deadline deadline) {
  if (!op) {
    return absl::UnimplementedError(absl::StrCat(
        what, " needs a block-device volume (--device); this share exports a directory"));
  }
  return op(deadline);
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             SystemClock::now().time_since_epoch())
      .count();
}

}  // namespace

void FillUptimes(ShareStatus& status) {
  const int64_t now = NowUnixMs();
  auto since = [now](int64_t start) {
    return start > 0 && now > start ? static_cast<uint64_t>(now - start) : uint64_t{0};
  };
  status.set_uptime_ms(since(status.started_unix_ms()));
  status.set_ganesha_uptime_ms(status.ganesha_pid() != 0 ? since(status.ganesha_started_unix_ms())
                                                         : 0);
}

std::optional<CallSlots::Slot> CallSlots::TryTake() {
  int free = free_->load();
  while (free > 0) {
    if (free_->compare_exchange_weak(free, free - 1)) return Slot(free_);
  }
  return std::nullopt;
}

ShareService::ShareService(StatusBoard& board, ShareCommands commands, ShareServiceLimits limits)
    : board_(board),
      commands_(std::move(commands)),
      limits_(limits),
      mutations_(limits.max_changes),
      watch_streams_(limits.max_watch_streams),
      queued_changes_(limits.max_queued_changes) {}

void ShareService::Decorate(ShareStatus& status) const {
  FillUptimes(status);
  if (commands_.live_fields) commands_.live_fields(status);
}

ShareStatus ShareService::Current() const {
  ShareStatus status = board_.Snapshot();
  Decorate(status);
  return status;
}

absl::Status ShareService::CheckEpoch(uint64_t requested) const {
  if (requested == limits_.epoch) return absl::OkStatus();
  if (limits_.epoch == 0) {
    // The caller believes it fences this server; nothing here keeps a stale
    // peer out, so it must learn that rather than be served.
    return absl::FailedPreconditionError(absl::StrCat(
        "request carries epoch ", requested,
        " but this share-manager is unfenced (epoch 0, started without --epoch): it was not "
        "started for epoch ",
        requested, " and fences nothing"));
  }
  if (requested == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("request carries no epoch but this share-manager is fenced at epoch ",
                     limits_.epoch, "; mutating calls must carry it"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("stale epoch: request carries epoch ", requested,
                   " but this share-manager serves epoch ", limits_.epoch));
}

absl::StatusOr<CallSlots::Slot> ShareService::AdmitMutation(uint64_t requested_epoch) {
  if (auto status = CheckEpoch(requested_epoch); !status.ok()) return status;
  auto slot = mutations_.TryTake();
  if (!slot) {
    return absl::ResourceExhaustedError(
        absl::StrCat(limits_.max_changes, " changes are already in progress; retry once they end"));
  }
  return std::move(*slot);
}

absl::StatusOr<uint64_t> ShareService::RunOnLoop(grpc::ServerContext* context,
                                                 std::function<absl::StatusOr<uint64_t>()> op) {
  const ShareState state = board_.Snapshot().state();
  if (state == sharemanager::v1::FAILED || state == sharemanager::v1::STOPPING) {
    return absl::UnavailableError(
        absl::StrCat("share-manager is ", ShareState_Name(state), "; not accepting changes"));
  }
  // Its slot goes back when the task has run (or is dropped with the loop),
  // not when this caller stops waiting for it.
  auto queued = queued_changes_.TryTake();
  if (!queued) {
    return absl::ResourceExhaustedError(
        absl::StrCat(limits_.max_queued_changes,
                     " changes are queued for the supervisor loop, which is behind; retry later"));
  }
  const auto deadline = std::min(context->deadline(), SystemClock::now() + kMaxCommandTime);
  auto promise = std::make_shared<std::promise<absl::StatusOr<uint64_t>>>();
  auto result = promise->get_future();
  commands_.post([promise, op = std::move(op),
                  slot = std::make_shared<CallSlots::Slot>(std::move(*queued))]() mutable {
    promise->set_value(op());
    slot.reset();
  });
  // The loop may quit (stop, failure) before it runs the task: the board is
  // closed then, and the caller is answered at once rather than at its deadline.
  while (result.wait_until(std::min(deadline, SystemClock::now() + kStreamCancelCheck)) !=
         std::future_status::ready) {
    if (board_.closed()) return absl::UnavailableError("share-manager is stopping");
    if (SystemClock::now() >= deadline) {
      return absl::DeadlineExceededError(
          "the supervisor loop did not complete the request in time");
    }
  }
  return result.get();
}

grpc::Status ShareService::Mount(grpc::ServerContext* context,
                                 const sharemanager::v1::MountRequest* request,
                                 sharemanager::v1::MountResponse* response) {
  auto admitted = AdmitMutation(request->epoch());
  if (!admitted.ok()) return base::ToGrpcStatus(admitted.status());
  if (commands_.attach_volume) {
    if (auto attached = commands_.attach_volume(CallerDeadline(context, kMaxCommandTime));
        !attached.ok()) {
      return base::ToGrpcStatus(attached);
    }
  }
  const uint64_t generation = request->generation();
  const auto handled =
      RunOnLoop(context, [mount = commands_.mount, generation] { return mount(generation); });
  if (!handled.ok()) return base::ToGrpcStatus(handled.status());
  response->set_handled_generation(*handled);
  *response->mutable_status() = Current();
  return grpc::Status::OK;
}

grpc::Status ShareService::Unmount(grpc::ServerContext* context,
                                   const sharemanager::v1::UnmountRequest* request,
                                   sharemanager::v1::UnmountResponse* response) {
  auto admitted = AdmitMutation(request->epoch());
  if (!admitted.ok()) return base::ToGrpcStatus(admitted.status());
  // A volume that cannot be released now (repairing, preparing) keeps its export.
  if (commands_.can_release_volume) {
    if (auto status = commands_.can_release_volume(); !status.ok()) {
      return base::ToGrpcStatus(status);
    }
  }
  const auto done = RunOnLoop(context, [unmount = commands_.unmount]() -> absl::StatusOr<uint64_t> {
    if (auto status = unmount(); !status.ok()) return status;
    return 0;
  });
  if (!done.ok()) return base::ToGrpcStatus(done.status());
  if (commands_.release_volume) {
    if (auto released = commands_.release_volume(CallerDeadline(context, kMaxCommandTime));
        !released.ok()) {
      return base::ToGrpcStatus(released);
    }
  }
  *response->mutable_status() = Current();
  return grpc::Status::OK;
}

grpc::Status ShareService::GetStatus(grpc::ServerContext*,
                                     const sharemanager::v1::GetStatusRequest*,
                                     ShareStatus* response) {
  *response = Current();
  return grpc::Status::OK;
}

grpc::Status ShareService::WatchStatus(grpc::ServerContext* context,
                                       const sharemanager::v1::WatchStatusRequest*,
                                       grpc::ServerWriter<ShareStatus>* writer) {
  const auto slot = watch_streams_.TryTake();
  if (!slot) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat(limits_.max_watch_streams,
                                     " status streams are already open; use GetStatus or retry"));
  }
  ShareStatus status = Current();
  uint64_t sent = status.version();
  if (!writer->Write(status)) return grpc::Status::OK;
  while (!context->IsCancelled()) {
    if (SystemClock::now() >= context->deadline()) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "watch deadline reached");
    }
    // A closed board still hands out its last change (e.g. STOPPING) before the stream ends.
    auto next = board_.WaitNewer(sent, std::chrono::steady_clock::now() + kStreamCancelCheck);
    if (!next) {
      if (board_.closed()) break;
      continue;
    }
    Decorate(*next);
    sent = next->version();
    if (!writer->Write(*next)) break;
  }
  return grpc::Status::OK;
}

grpc::Status ShareService::FilesystemTrim(grpc::ServerContext* context,
                                          const sharemanager::v1::FilesystemTrimRequest* request,
                                          sharemanager::v1::FilesystemTrimResponse* response) {
  auto admitted = AdmitMutation(request->epoch());
  if (!admitted.ok()) return base::ToGrpcStatus(admitted.status());
  auto trimmed =
      NeedsDevice(commands_.trim, "trim", CallerDeadline(context, limits_.max_volume_op_time));
  if (!trimmed.ok()) return base::ToGrpcStatus(trimmed.status());
  response->set_bytes_trimmed(*trimmed);
  return grpc::Status::OK;
}

grpc::Status ShareService::FilesystemResize(
    grpc::ServerContext* context, const sharemanager::v1::FilesystemResizeRequest* request,
    sharemanager::v1::FilesystemResizeResponse* response) {
  auto admitted = AdmitMutation(request->epoch());
  if (!admitted.ok()) return base::ToGrpcStatus(admitted.status());
  auto resized =
      NeedsDevice(commands_.resize, "resize", CallerDeadline(context, limits_.max_volume_op_time));
  if (!resized.ok()) return base::ToGrpcStatus(resized.status());
  response->set_old_size_bytes(resized->old_size_bytes);
  response->set_new_size_bytes(resized->new_size_bytes);
  response->set_resized(resized->new_size_bytes != resized->old_size_bytes);
  return grpc::Status::OK;
}

}  // namespace sharemgr
