// What the reconciler asks a share-manager: how it is (one bounded call) and
// to remount. The gRPC implementation is GrpcShareConnector; simulations
// provide their own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "controller/runtime/pod_runtime.h"
#include "sharemanager/v1/sharemanager.pb.h"

namespace controller {

// A repair (or start-up filesystem check) the share-manager reports running.
struct RepairObservation {
  std::string what;
  // On the share-manager's monotonic clock: immune to either side's wall clock.
  int64_t elapsed_ms = 0;
};

struct ShareObservation {
  bool reachable = false;
  std::string error;  // why not reachable
  sharemanager::v1::ShareState state = sharemanager::v1::SHARE_STATE_UNSPECIFIED;
  std::string reason;
  bool read_only = false;
  uint64_t handled_generation = 0;
  uint64_t epoch = 0;
  // Who answered: the connector reports an answer from another volume, epoch
  // or share-manager instance than the pod's as unreachable, never as health;
  // the reconciler checks volume and epoch again.
  std::string volume;
  int64_t started_unix_ms = 0;
  sharemanager::v1::VolumeState volume_state = sharemanager::v1::VOLUME_STATE_UNSPECIFIED;
  std::optional<RepairObservation> repair;  // while one runs
};

class ShareConnector {
 public:
  virtual ~ShareConnector() = default;
  // Bounded by the connector's deadline; never throws, never blocks longer.
  virtual ShareObservation Observe(const Pod& pod) = 0;
  // Asks the pod to handle remount `generation`, fenced by `epoch`.
  virtual absl::StatusOr<uint64_t> Mount(const Pod& pod, uint64_t epoch, uint64_t generation) = 0;
};

}  // namespace controller
