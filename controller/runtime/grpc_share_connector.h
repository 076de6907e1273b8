// ShareConnector over gRPC: one ShareClient per endpoint, every call bounded
// by the client's deadline.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "controller/runtime/share_connector.h"
#include "controller/share_client.h"

namespace controller {

// Why `status` is not from `pod`'s share-manager (another volume, epoch or
// instance answers on its endpoint), or "" when it is. The instance check
// compares the pod's uid with the one the share-manager reports (--pod-uid);
// for a pod without a uid, the share-manager's own start stamp with the pod's
// started_unix_ms: within [-2 s, +60 s] (the daemon stamps itself shortly
// after exec; both stamps were taken on this machine's clock at the time).
std::string ForeignAnswer(const Pod& pod, const sharemanager::v1::ShareStatus& status);

class GrpcShareConnector final : public ShareConnector {
 public:
  // A call to a share-manager that failed: its method (GetStatus, Mount) and
  // code. For metrics; called on the caller's thread.
  using RpcErrorHook = std::function<void(const char* method, absl::StatusCode code)>;

  explicit GrpcShareConnector(ShareClientOptions options = {}, RpcErrorHook on_error = nullptr)
      : options_(options), on_error_(std::move(on_error)) {}

  ShareObservation Observe(const Pod& pod) override;
  absl::StatusOr<uint64_t> Mount(const Pod& pod, uint64_t epoch, uint64_t generation) override;

 private:
  std::shared_ptr<ShareClient> ClientFor(const std::string& endpoint);
  void Forget(const std::string& endpoint);
  // `result`, after counting it when it failed.
  template <typename T>
  absl::StatusOr<T> Counted(const char* method, absl::StatusOr<T> result) const {
    if (!result.ok() && on_error_) on_error_(method, result.status().code());
    return result;
  }

  ShareClientOptions options_;
  const RpcErrorHook on_error_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<ShareClient>> clients_ ABSL_GUARDED_BY(mu_);
};

}  // namespace controller
