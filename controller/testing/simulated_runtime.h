// An in-memory PodRuntime and ShareConnector for simulations and benchmarks:
// pods are records whose phase and health the test drives (die, freeze, go
// read-only, repair), and share-managers that answer Observe and Mount from them.
// Observe and Mount go through a FaultInjector (wrap the runtime side in a
// FaultyPodRuntime). Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "controller/core/listeners.h"
#include "controller/core/wall_clock.h"
#include "controller/runtime/pod_runtime.h"
#include "controller/runtime/share_connector.h"
#include "controller/testing/fault_injector.h"

namespace controller {

class SimulatedCluster final : public PodRuntime, public ShareConnector {
 public:
  struct SimPod {
    Pod pod;
    bool frozen = false;     // share-manager answers nothing (its calls time out)
    bool serving = true;     // SERVING once Running
    bool read_only = false;  // the export went read-only
    uint64_t handled_generation = 0;
    uint64_t mounts = 0;  // Mount calls that reached it
    uint64_t stale_epoch_refusals = 0;
    // A repair in progress (what), since repair_started_ms on the cluster's
    // clock; a start-up check reports STARTING, any other repair DEGRADED.
    std::optional<std::string> repair;
    int64_t repair_started_ms = 0;
    bool startup_check = false;
    uint64_t reported_epoch = 0;  // nonzero: answers as this epoch (another server)
    std::string reported_volume;  // nonempty: answers as this volume's server
    // Deleted, still running until then (a termination grace period); on the clock.
    std::optional<int64_t> gone_at_ms;
    uint64_t template_version = 0;  // the cluster's when it was created
  };

  // Repairs report their elapsed time on `clock` (0 without one), as a
  // share-manager does on its monotonic clock.
  explicit SimulatedCluster(const MonotonicClock* clock = nullptr) : clock_(clock) {}

  // PodRuntime. New pods start Running (the simulation's pods start at once).
  absl::StatusOr<Pod> Create(const sharemanager::controller::v1::ShareSpec& spec,
                             uint64_t epoch) override;
  absl::Status Delete(const std::string& pod) override;
  absl::StatusOr<std::vector<Pod>> List(const std::string& volume) override;
  void Watch(Listener listener) override;

  // ShareConnector.
  ShareObservation Observe(const Pod& pod) override;
  absl::StatusOr<uint64_t> Mount(const Pod& pod, uint64_t epoch, uint64_t generation) override;

  // Test controls.
  // The pod ends with `exit_code` and, as Kubernetes reports it, `message`.
  void Kill(const std::string& pod, int exit_code = 3, const std::string& message = "");
  void Freeze(const std::string& pod, bool frozen);
  void SetReadOnly(const std::string& pod, bool read_only);
  // A repair starts now; while it runs the pod is not SERVING and refuses Mount.
  void StartRepair(const std::string& pod, const std::string& what, bool startup_check = false);
  // The repair ends; the share serves again or (serving = false) does not.
  void EndRepair(const std::string& pod, bool serving = true);
  void SetReportedEpoch(const std::string& pod, uint64_t epoch);
  void SetReportedVolume(const std::string& pod, const std::string& volume);
  void SetHandledGeneration(const std::string& pod, uint64_t generation);
  // A new pod template: pods created before are listed outdated from now on.
  void NewTemplate();
  // A deleted pod keeps running this long before it is gone (needs a clock).
  void SetDeleteLag(int64_t ms);
  // The next `n` Delete / Mount calls fail without effect (-1: all of them).
  void FailDeletes(int n);
  void FailMounts(int n);
  // Delete and Mount calls that reached the cluster, failed ones included.
  uint64_t delete_calls() const;
  uint64_t mount_calls() const;
  std::vector<SimPod> Pods(const std::string& volume) const;
  // Pods of the volume that are alive (Pending/Running/Unknown).
  int LivePods(const std::string& volume) const;

  FaultInjector& rpc_faults() { return rpc_faults_; }

 private:
  // Removes deleted pods whose lag is over.
  void ReapLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a call fails by the FailDeletes / FailMounts budget. Under the lock.
  static bool TakeFailure(int& budget);
  // Applies `change` to the pod, if it exists, under the lock.
  void Change(const std::string& pod, const std::function<void(SimPod&)>& change)
      ABSL_LOCKS_EXCLUDED(mu_);
  int64_t NowMs() const { return clock_ != nullptr ? clock_->MonotonicMs() : 0; }

  const MonotonicClock* clock_;
  mutable absl::Mutex mu_;
  // Mutable: reading them first reaps the pods whose deletion is over.
  mutable std::map<std::string, SimPod> pods_ ABSL_GUARDED_BY(mu_);  // by pod name
  mutable std::unordered_map<std::string, std::vector<std::string>> by_volume_ ABSL_GUARDED_BY(mu_);
  mutable std::set<std::string> deleting_ ABSL_GUARDED_BY(mu_);  // pods with gone_at_ms
  Listeners listeners_;
  FaultInjector rpc_faults_;
  int64_t delete_lag_ms_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t template_version_ ABSL_GUARDED_BY(mu_) = 0;
  int delete_failures_ ABSL_GUARDED_BY(mu_) = 0;
  int mount_failures_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t delete_calls_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t mount_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace controller
