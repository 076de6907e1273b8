#include "controller/runtime/grpc_share_connector.h"

#include "absl/strings/str_cat.h"

namespace controller {

std::string ForeignAnswer(const Pod& pod, const sharemanager::v1::ShareStatus& status) {
  // Every share-manager states its volume: an empty one is a stranger too.
  bool same = status.volume() == pod.volume && status.epoch() == pod.epoch;
  if (same && !pod.uid.empty()) {
    same = status.pod_uid() == pod.uid;
  } else if (same && pod.started_unix_ms != 0) {
    const int64_t delta = status.started_unix_ms() - pod.started_unix_ms;
    same = delta >= -2000 && delta <= 60'000;
  }
  if (same) return "";
  return absl::StrCat(
      "unreachable: ", pod.endpoint, " answered by volume '", status.volume(), "' epoch ",
      status.epoch(), " started at ", status.started_unix_ms(), " ms, not pod ", pod.name,
      " (volume '", pod.volume, "' epoch ", pod.epoch, " started at ", pod.started_unix_ms, " ms",
      pod.uid.empty() ? "" : absl::StrCat(" uid ", pod.uid), ")",
      pod.uid.empty() ? "" : absl::StrCat("; it reports uid '", status.pod_uid(), "'"));
}

std::shared_ptr<ShareClient> GrpcShareConnector::ClientFor(const std::string& endpoint) {
  absl::MutexLock lock(&mu_);
  auto& client = clients_[endpoint];
  if (!client) client = std::make_shared<ShareClient>(endpoint, options_);
  return client;
}

// A channel that failed to connect sits out gRPC's reconnect backoff; a pod
// that is just starting must be seen as soon as it listens, so start afresh.
void GrpcShareConnector::Forget(const std::string& endpoint) {
  absl::MutexLock lock(&mu_);
  clients_.erase(endpoint);
}

ShareObservation GrpcShareConnector::Observe(const Pod& pod) {
  if (pod.endpoint.empty()) return {.error = "pod has no endpoint"};
  const auto status = Counted("GetStatus", ClientFor(pod.endpoint)->GetStatus());
  if (!status.ok()) {
    if (status.status().code() == absl::StatusCode::kUnavailable) Forget(pod.endpoint);
    return {.error = std::string(status.status().message())};
  }
  if (auto foreign = ForeignAnswer(pod, *status); !foreign.empty()) {
    Forget(pod.endpoint);
    return {.error = foreign};
  }
  ShareObservation seen{.reachable = true,
                        .state = status->state(),
                        .reason = status->reason(),
                        .read_only = status->read_only(),
                        .handled_generation = status->remount_generation(),
                        .epoch = status->epoch(),
                        .volume = status->volume(),
                        .started_unix_ms = status->started_unix_ms(),
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
  // The epoch fences the volume's own share-manager, not a stranger's: ask
  // who answers first (one more bounded call).
  auto client = ClientFor(pod.endpoint);
  const auto status = Counted("GetStatus", client->GetStatus());
  if (!status.ok()) return status.status();
  if (auto foreign = ForeignAnswer(pod, *status); !foreign.empty()) {
    return absl::UnavailableError(foreign);
  }
  return Counted("Mount", client->Mount(epoch, generation));
}

}  // namespace controller
