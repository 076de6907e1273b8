// An in-memory PodRuntime and ShareConnector for simulations and benchmarks:
// pods are records whose phase and health the test drives (die, freeze, go
// read-only), and share-managers that answer Observe and Mount from them.
// Observe and Mount go through a FaultInjector (wrap the runtime side in a
// FaultyPodRuntime). Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "controller/fault_injector.h"
#include "controller/listeners.h"
#include "controller/pod_runtime.h"
#include "controller/share_connector.h"

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
  };

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
  void Kill(const std::string& pod, int exit_code = 3);
  void Freeze(const std::string& pod, bool frozen);
  void SetReadOnly(const std::string& pod, bool read_only);
  std::vector<SimPod> Pods(const std::string& volume) const;
  // Pods of the volume that are alive (Pending/Running/Unknown).
  int LivePods(const std::string& volume) const;

  FaultInjector& rpc_faults() { return rpc_faults_; }

 private:
  mutable std::mutex mu_;
  std::map<std::string, SimPod> pods_;  // by pod name
  std::unordered_map<std::string, std::vector<std::string>> by_volume_;
  Listeners listeners_;
  FaultInjector rpc_faults_;
};

}  // namespace controller
