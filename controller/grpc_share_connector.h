// ShareConnector over gRPC: one ShareClient per endpoint, every call bounded
// by the client's deadline.
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "controller/share_client.h"
#include "controller/share_connector.h"

namespace controller {

class GrpcShareConnector final : public ShareConnector {
 public:
  explicit GrpcShareConnector(ShareClientOptions options = {}) : options_(options) {}

  ShareObservation Observe(const Pod& pod) override;
  absl::StatusOr<uint64_t> Mount(const Pod& pod, uint64_t epoch, uint64_t generation) override;

 private:
  std::shared_ptr<ShareClient> ClientFor(const std::string& endpoint);
  void Forget(const std::string& endpoint);

  ShareClientOptions options_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<ShareClient>> clients_;
};

}  // namespace controller
