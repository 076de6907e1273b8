#include "controller/share_client.h"

#include "base/grpc_status.h"

namespace controller {
namespace {

namespace v1 = sharemanager::v1;
using base::FromGrpcStatus;

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& endpoint,
                                           const ShareClientOptions& options) {
  const milliseconds deadline = options.deadline;
  grpc::ChannelArguments args;
  // The minimum connect timeout: a connect never outlives a call's deadline.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(deadline.count()));
  // Reconnect quickly to a restarted share-manager.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Keepalive within what the server permits (pings every 10 s or more).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  options.security.Apply(args);
  return grpc::CreateCustomChannel(endpoint, options.security.credentials(), args);
}

}  // namespace

ShareClient::ShareClient(const std::string& endpoint, ShareClientOptions options)
    : endpoint_(endpoint),
      options_(options),
      channel_(MakeChannel(endpoint, options)),
      stub_(v1::ShareManager::NewStub(channel_)),
      health_(grpc::health::v1::Health::NewStub(channel_)) {}

void ShareClient::Prepare(grpc::ClientContext& context,
                          std::optional<milliseconds> deadline) const {
  context.set_deadline(std::chrono::system_clock::now() + deadline.value_or(options_.deadline));
  context.set_wait_for_ready(false);
}

absl::StatusOr<v1::ShareStatus> ShareClient::GetStatus(std::optional<milliseconds> deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::ShareStatus status;
  if (auto s = stub_->GetStatus(&context, v1::GetStatusRequest(), &status); !s.ok()) {
    return base::FromGrpcStatus(s);
  }
  return status;
}

absl::StatusOr<uint64_t> ShareClient::Mount(uint64_t epoch, uint64_t generation,
                                            std::optional<milliseconds> deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::MountRequest request;
  request.set_epoch(epoch);
  request.set_generation(generation);
  v1::MountResponse response;
  if (auto s = stub_->Mount(&context, request, &response); !s.ok()) return base::FromGrpcStatus(s);
  return response.handled_generation();
}

absl::Status ShareClient::Unmount(uint64_t epoch, std::optional<milliseconds> deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::UnmountRequest request;
  request.set_epoch(epoch);
  v1::UnmountResponse response;
  return base::FromGrpcStatus(stub_->Unmount(&context, request, &response));
}

absl::StatusOr<bool> ShareClient::Check(const std::string& service,
                                        std::optional<milliseconds> deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  if (auto s = health_->Check(&context, request, &response); !s.ok())
    return base::FromGrpcStatus(s);
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

StatusWatch::StatusWatch(std::string endpoint, std::function<void(const Event&)> on_event,
                         base::ClientSecurity security, milliseconds max_backoff)
    : endpoint_(std::move(endpoint)),
      on_event_(std::move(on_event)),
      security_(std::move(security)),
      max_backoff_(max_backoff),
      thread_([this] { Run(); }) {}

StatusWatch::~StatusWatch() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (active_ != nullptr) active_->TryCancel();
  }
  thread_.join();
}

void StatusWatch::Run() {
  milliseconds backoff(50);
  // A share-manager that never answered yet is most likely starting (a new
  // pod): it is retried at a short fixed interval for a while, so its first
  // status is seen within kStartingRetry of it listening instead of after a
  // backoff that has already doubled a few times.
  const auto started = std::chrono::steady_clock::now();
  bool ever_answered = false;
  for (;;) {
    // A fresh channel per attempt: our own backoff paces reconnects, not gRPC's.
    auto stub = v1::ShareManager::NewStub(
        MakeChannel(endpoint_, {.deadline = milliseconds(2000), .security = security_}));
    grpc::ClientContext context;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      active_ = &context;
    }
    auto stream = stub->WatchStatus(&context, v1::WatchStatusRequest());
    v1::ShareStatus status;
    bool got_any = false;
    while (stream->Read(&status)) {
      got_any = true;
      on_event_({.status = status, .error = ""});
    }
    const auto finished = stream->Finish();
    {
      absl::MutexLock lock(&mu_);
      active_ = nullptr;
      if (stop_) return;
    }
    on_event_({.status = std::nullopt,
               .error = finished.ok() ? "stream ended" : finished.error_message()});
    if (got_any) backoff = milliseconds(50);
    ever_answered = ever_answered || got_any;
    const bool starting =
        !ever_answered && std::chrono::steady_clock::now() - started < kStartingWindow;
    absl::MutexLock lock(&mu_);
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping),
                             absl::FromChrono(starting ? kStartingRetry : backoff))) {
      return;
    }
    if (starting) continue;
    backoff = std::min(backoff * 2, max_backoff_);
  }
}

}  // namespace controller
