// The share-manager API and grpc.health.v1 from the controller's side. Every
// call has a deadline (a few seconds by default, settable per call) and never
// waits for the server to become ready; the channel gives up connecting at the
// deadline, so a dead or blackholed peer costs at most one deadline.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/tls.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "sharemanager/v1/sharemanager.grpc.pb.h"

namespace controller {

using std::chrono::milliseconds;

struct ShareClientOptions {
  milliseconds deadline{2000};
  // Plaintext by default; mTLS to share-managers started with TLS
  // (base::ResolveClientSecurity: one set of credentials for every channel).
  base::ClientSecurity security;
};

class ShareClient {
 public:
  ShareClient(const std::string& endpoint, ShareClientOptions options = {});

  absl::StatusOr<sharemanager::v1::ShareStatus> GetStatus(
      std::optional<milliseconds> deadline = {});
  absl::StatusOr<uint64_t> Mount(uint64_t epoch, uint64_t generation,
                                 std::optional<milliseconds> deadline = {});
  absl::Status Unmount(uint64_t epoch, std::optional<milliseconds> deadline = {});
  // grpc.health.v1 Check: true iff SERVING.
  absl::StatusOr<bool> Check(const std::string& service, std::optional<milliseconds> deadline = {});

  const std::string& endpoint() const { return endpoint_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

 private:
  void Prepare(grpc::ClientContext& context, std::optional<milliseconds> deadline) const;

  std::string endpoint_;
  ShareClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<sharemanager::v1::ShareManager::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

// Follows WatchStatus of one share-manager, reconnecting with backoff. Every
// status, and every loss of the stream ("unreachable"), is an observation
// handed to the callback on the watch's own thread; nothing throws.
class StatusWatch {
 public:
  struct Event {
    std::optional<sharemanager::v1::ShareStatus> status;  // nullopt: unreachable
    std::string error;
  };
  // Connects as `security` says (plaintext by default).
  StatusWatch(std::string endpoint, std::function<void(const Event&)> on_event,
              base::ClientSecurity security = {}, milliseconds max_backoff = milliseconds(2000));
  ~StatusWatch();
  StatusWatch(const StatusWatch&) = delete;
  StatusWatch& operator=(const StatusWatch&) = delete;

  // Until a first status arrives, and for at most kStartingWindow, failed
  // attempts are retried every kStartingRetry; then the backoff doubles from
  // 50 ms up to max_backoff.
  static constexpr milliseconds kStartingRetry{25};
  static constexpr milliseconds kStartingWindow{2000};

 private:
  void Run();

  std::string endpoint_;
  std::function<void(const Event&)> on_event_;
  base::ClientSecurity security_;
  milliseconds max_backoff_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread thread_;
};

}  // namespace controller
