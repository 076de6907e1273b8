// A PodRuntime whose every call can fail, time out (before or after taking
// effect) or be delayed, as its FaultInjector decides; wraps any runtime.
#pragma once

#include "controller/runtime/pod_runtime.h"
#include "controller/testing/fault_injector.h"

namespace controller {

class FaultyPodRuntime final : public PodRuntime {
 public:
  explicit FaultyPodRuntime(PodRuntime& inner) : inner_(inner) {}
  FaultInjector& faults() { return faults_; }

  absl::StatusOr<Pod> Create(const sharemanager::controller::v1::ShareSpec& spec,
                             uint64_t epoch) override {
    return WithFault<absl::StatusOr<Pod>>(faults_, "create pod for " + spec.volume(),
                                          [&] { return inner_.Create(spec, epoch); });
  }
  absl::Status Delete(const std::string& pod) override {
    return WithFault<absl::Status>(faults_, "delete pod " + pod,
                                   [&] { return inner_.Delete(pod); });
  }
  absl::StatusOr<std::vector<Pod>> List(const std::string& volume) override {
    return WithFault<absl::StatusOr<std::vector<Pod>>>(faults_, "list pods of " + volume,
                                                       [&] { return inner_.List(volume); });
  }
  void Watch(Listener listener) override { inner_.Watch(std::move(listener)); }
  absl::StatusOr<StartCheck> CheckStart(const sharemanager::controller::v1::ShareSpec& spec,
                                        uint64_t epoch) override {
    return inner_.CheckStart(spec, epoch);
  }

 private:
  PodRuntime& inner_;
  FaultInjector faults_;
};

}  // namespace controller
