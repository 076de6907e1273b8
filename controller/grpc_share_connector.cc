#include "controller/grpc_share_connector.h"

namespace controller {

std::shared_ptr<ShareClient> GrpcShareConnector::ClientFor(const std::string& endpoint) {
  std::lock_guard lock(mu_);
  auto& client = clients_[endpoint];
  if (!client) client = std::make_shared<ShareClient>(endpoint, options_);
  return client;
}

// A channel that failed to connect sits out gRPC's reconnect backoff; a pod
// that is just starting must be seen as soon as it listens, so start afresh.
void GrpcShareConnector::Forget(const std::string& endpoint) {
  std::lock_guard lock(mu_);
  clients_.erase(endpoint);
}

ShareObservation GrpcShareConnector::Observe(const Pod& pod) {
  if (pod.endpoint.empty()) return {.error = "pod has no endpoint"};
  auto status = ClientFor(pod.endpoint)->GetStatus();
  if (!status.ok()) {
    if (status.status().code() == absl::StatusCode::kUnavailable) Forget(pod.endpoint);
    return {.error = std::string(status.status().message())};
  }
  ShareObservation seen{.reachable = true,
                        .state = status->state(),
                        .reason = status->reason(),
                        .read_only = status->read_only(),
                        .handled_generation = status->remount_generation(),
                        .epoch = status->epoch(),
                        .volume_state = status->volume_state()};
  if (status->has_repair()) {
    seen.repair =
        RepairObservation{.what = status->repair().what(),
                          .elapsed_ms = static_cast<int64_t>(status->repair().elapsed_ms())};
  }
  return seen;
}

absl::StatusOr<uint64_t> GrpcShareConnector::Mount(const Pod& pod, uint64_t epoch,
                                                   uint64_t generation) {
  if (pod.endpoint.empty()) return absl::UnavailableError("pod has no endpoint");
  return ClientFor(pod.endpoint)->Mount(epoch, generation);
}

}  // namespace controller
