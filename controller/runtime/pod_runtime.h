// Where share-manager pods run: Kubernetes in production, local processes
// here (LocalPodRuntime), or a simulation in tests.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sharemanager/controller/v1/share_record.pb.h"

namespace controller {

enum class PodPhase { kPending, kRunning, kSucceeded, kFailed, kUnknown };

const char* PodPhaseName(PodPhase phase);

struct Pod {
  std::string name;
  std::string volume;
  uint64_t epoch = 0;
  PodPhase phase = PodPhase::kPending;
  // share-manager's gRPC address, once known.
  std::string endpoint;
  // NFS port the pod serves on.
  uint16_t nfs_port = 0;
  int exit_code = 0;  // for Succeeded/Failed
  // Why it ended, in its own words (Kubernetes' termination message: the
  // last line share-manager logged); empty when the runtime has none.
  std::string termination_message;
  // Delete has started and some of the pod's processes are still alive; the
  // pod stays listed until every one of them is gone.
  bool terminating = false;
  // When the pod's share-manager started (wall clock, Unix ms; 0 unknown): who
  // answers on `endpoint` must be this instance, not a successor or stranger.
  int64_t started_unix_ms = 0;
  // The instance id the pod's share-manager was given (--pod-uid) and reports
  // in its status; empty when the runtime gives none (then started_unix_ms
  // tells instances apart).
  std::string uid;
  // Made from another pod template than the runtime makes pods from now (a
  // new image, say): the reconciler replaces it, one share at a time, as it
  // replaces a failed pod (the next epoch, once this one is gone).
  bool outdated = false;
};

// The pod name for (volume, epoch): one pod per epoch, so names never repeat.
std::string PodName(const std::string& volume, uint64_t epoch);

// Whether a new pod may start now (PodRuntime::CheckStart).
struct StartCheck {
  bool ready = true;
  // Not ready: ask again after this long, and what it waits for (stable
  // across asks: it goes into the share's status).
  int64_t retry_after_ms = 0;
  std::string waiting_for;
  // What the runtime saw of the volume's earlier epochs (the serving lease:
  // the epoch recorded in etcd, and the live holder's). One at or above the
  // epoch asked about means that epoch can never start (its pod would be
  // refused the lease): the reconciler moves the share above it.
  std::optional<uint64_t> recorded_epoch;
  std::optional<uint64_t> holder_epoch;
};

class PodRuntime {
 public:
  using Listener = std::function<void(const std::string& volume)>;
  virtual ~PodRuntime() = default;

  // Whether a pod for the spec's volume under `epoch` may be created now:
  // e.g. not while the previous pod's serving lease is still held in etcd
  // (controller/ha/serving_lease_gate.h). Asked right before each Create of the
  // reconciler. Default: at once.
  virtual absl::StatusOr<StartCheck> CheckStart(const sharemanager::controller::v1::ShareSpec& spec,
                                                uint64_t epoch) {
    (void)spec;
    (void)epoch;
    return StartCheck{};
  }

  // Starts a share-manager pod for the spec's volume with this epoch.
  virtual absl::StatusOr<Pod> Create(const sharemanager::controller::v1::ShareSpec& spec,
                                     uint64_t epoch) = 0;
  // Deletes (kills) the pod without waiting for it: OK when it is gone or its
  // termination has just been started (List shows it `terminating` until all
  // its processes are gone, and watchers hear when it leaves the list);
  // Unavailable while a termination started earlier is still under way.
  virtual absl::Status Delete(const std::string& pod) = 0;
  // Every pod of the volume, whatever its phase, until deleted; a pod Create
  // returned is listed from then on. A record whose pods are all gone may be
  // let go (hold_record): a runtime that can lose track of a pod (a Create
  // whose answer was lost) must make sure such a pod goes with its share
  // (Kubernetes: its ownerReference, which the garbage collector follows).
  virtual absl::StatusOr<std::vector<Pod>> List(const std::string& volume) = 0;
  // Calls `listener` whenever a pod of some volume changes phase.
  virtual void Watch(Listener listener) = 0;
};

}  // namespace controller
