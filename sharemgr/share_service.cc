#include "sharemgr/share_service.h"

#include <future>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/grpc_status.h"

namespace sharemgr {
namespace {

using sharemanager::v1::ShareState;
using sharemanager::v1::ShareStatus;
using SystemClock = std::chrono::system_clock;

// No mutation may hold a handler longer than this, whatever deadline the caller sent.
constexpr auto kMaxCommandTime = std::chrono::seconds(10);
// Streams re-check for cancellation this often; changes wake them at once.
constexpr auto kStreamCancelCheck = std::chrono::milliseconds(250);

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

ShareService::ShareService(StatusBoard& board, ShareCommands commands, uint64_t epoch)
    : board_(board), commands_(std::move(commands)), epoch_(epoch) {}

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
  if (requested == 0 || requested == epoch_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("stale epoch: request carries epoch ", requested,
                   " but this share-manager serves epoch ", epoch_));
}

absl::StatusOr<uint64_t> ShareService::RunOnLoop(grpc::ServerContext* context,
                                                 std::function<absl::StatusOr<uint64_t>()> op) {
  const ShareState state = board_.Snapshot().state();
  if (state == sharemanager::v1::FAILED || state == sharemanager::v1::STOPPING) {
    return absl::UnavailableError(
        absl::StrCat("share-manager is ", ShareState_Name(state), "; not accepting changes"));
  }
  const auto deadline = std::min(context->deadline(), SystemClock::now() + kMaxCommandTime);
  auto promise = std::make_shared<std::promise<absl::StatusOr<uint64_t>>>();
  auto result = promise->get_future();
  commands_.post([promise, op = std::move(op)] { promise->set_value(op()); });
  if (result.wait_until(deadline) != std::future_status::ready) {
    return absl::DeadlineExceededError("the supervisor loop did not complete the request in time");
  }
  return result.get();
}

grpc::Status ShareService::Mount(grpc::ServerContext* context,
                                 const sharemanager::v1::MountRequest* request,
                                 sharemanager::v1::MountResponse* response) {
  if (auto status = CheckEpoch(request->epoch()); !status.ok()) return base::ToGrpcStatus(status);
  if (auto attached = RunVolumeStep(context, commands_.attach_volume, "mount the volume");
      !attached.ok()) {
    return base::ToGrpcStatus(attached);
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
  if (auto status = CheckEpoch(request->epoch()); !status.ok()) return base::ToGrpcStatus(status);
  const auto done = RunOnLoop(context, [unmount = commands_.unmount]() -> absl::StatusOr<uint64_t> {
    if (auto status = unmount(); !status.ok()) return status;
    return 0;
  });
  if (!done.ok()) return base::ToGrpcStatus(done.status());
  if (auto released = RunVolumeStep(context, commands_.release_volume, "unmount the volume");
      !released.ok()) {
    return base::ToGrpcStatus(released);
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

template <typename T>
absl::StatusOr<T> ShareService::RunExclusive(grpc::ServerContext* context,
                                             std::function<absl::StatusOr<T>()> op,
                                             const char* what) {
  if (!op) {
    return absl::UnimplementedError(absl::StrCat(
        what, " needs a block-device volume (--device); this share exports a directory"));
  }
  bool idle = false;
  if (!fs_op_busy_->compare_exchange_strong(idle, true)) {
    return absl::AbortedError(
        absl::StrCat("another filesystem operation is running; ", what, " refused (not queued)"));
  }
  auto promise = std::make_shared<std::promise<absl::StatusOr<T>>>();
  auto result = promise->get_future();
  std::thread([promise, op = std::move(op), busy = fs_op_busy_] {
    auto outcome = op();
    busy->store(false);  // before the caller sees the outcome and may start another
    promise->set_value(std::move(outcome));
  }).detach();
  const auto deadline = std::min(context->deadline(), SystemClock::now() + std::chrono::hours(1));
  if (result.wait_until(deadline) != std::future_status::ready) {
    return absl::DeadlineExceededError(absl::StrCat(
        what,
        " still running at the deadline; it goes on, and new requests are refused until it ends"));
  }
  return result.get();
}

absl::Status ShareService::RunVolumeStep(grpc::ServerContext* context,
                                         const std::function<absl::Status()>& step,
                                         const char* what) {
  if (!step) return absl::OkStatus();  // a directory share has no volume to (un)mount
  return RunExclusive<uint64_t>(
             context,
             [step]() -> absl::StatusOr<uint64_t> {
               if (auto status = step(); !status.ok()) return status;
               return 0;
             },
             what)
      .status();
}

grpc::Status ShareService::FilesystemTrim(grpc::ServerContext* context,
                                          const sharemanager::v1::FilesystemTrimRequest* request,
                                          sharemanager::v1::FilesystemTrimResponse* response) {
  if (auto status = CheckEpoch(request->epoch()); !status.ok()) return base::ToGrpcStatus(status);
  auto trimmed = RunExclusive<uint64_t>(context, commands_.trim, "trim");
  if (!trimmed.ok()) return base::ToGrpcStatus(trimmed.status());
  response->set_bytes_trimmed(*trimmed);
  return grpc::Status::OK;
}

grpc::Status ShareService::FilesystemResize(
    grpc::ServerContext* context, const sharemanager::v1::FilesystemResizeRequest* request,
    sharemanager::v1::FilesystemResizeResponse* response) {
  if (auto status = CheckEpoch(request->epoch()); !status.ok()) return base::ToGrpcStatus(status);
  auto resized = RunExclusive<ResizeResult>(context, commands_.resize, "resize");
  if (!resized.ok()) return base::ToGrpcStatus(resized.status());
  response->set_old_size_bytes(resized->old_size_bytes);
  response->set_new_size_bytes(resized->new_size_bytes);
  response->set_resized(resized->new_size_bytes != resized->old_size_bytes);
  return grpc::Status::OK;
}

}  // namespace sharemgr
