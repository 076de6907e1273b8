// Lease-gated replacement (README "Highly available share-controller"): when
// share-managers run with the serving lease (--lease-etcd), a new pod of a
// volume starts only once the previous holder's lease key P/leases/<volume>
// is gone in etcd and the drift margin has passed since this controller saw
// it gone:
//
//   the old share-manager stops serving by its clock at s + TTL - m (+ its
//   stop time); etcd expires its lease no earlier than r + TTL, r >= s, on
//   its clock; with clock rates off by rho each, waiting
//   d >= 2 * rho * TTL + stop_time - m after seeing the key gone never
//   overlaps (the default, max(500 ms, TTL/50), covers rho = 1 % alone).
//
// A wrapper of the runtime: its CheckStart reads both keys (one Txn); Create,
// Delete, List and Watch go straight through. The volume's first pod ever
// (P/epochs/<volume> absent) starts at once.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "controller/pod_runtime.h"
#include "etcd/client.h"

namespace controller {

struct ServingLeaseGateOptions {
  // P, as the share-managers' --lease-prefix.
  std::string prefix;
  base::Duration drift_margin{500};
  // While the key is held: ask again this often.
  base::Duration poll{200};
};

class ServingLeaseGate final : public PodRuntime {
 public:
  ServingLeaseGate(PodRuntime& runtime, std::shared_ptr<etcd::EtcdClient> client,
                   ServingLeaseGateOptions options, const base::TimeSource& clock);

  // Ready when no lease key is held for the volume and either no epoch was
  // ever recorded or the drift margin has passed since the key was first
  // seen gone by the checks for this pod (a restart, or a new replacement,
  // waits the margin again).
  absl::StatusOr<StartCheck> CheckStart(const sharemanager::controller::v1::ShareSpec& spec,
                                        uint64_t epoch) override;
  absl::StatusOr<Pod> Create(const sharemanager::controller::v1::ShareSpec& spec,
                             uint64_t epoch) override {
    return runtime_.Create(spec, epoch);
  }
  absl::Status Delete(const std::string& pod) override { return runtime_.Delete(pod); }
  absl::StatusOr<std::vector<Pod>> List(const std::string& volume) override {
    return runtime_.List(volume);
  }
  void Watch(Listener listener) override { runtime_.Watch(std::move(listener)); }

 private:
  PodRuntime& runtime_;
  const std::shared_ptr<etcd::EtcdClient> client_;
  const ServingLeaseGateOptions options_;
  const base::TimeSource& clock_;
  absl::Mutex mu_;
  // By volume: when its lease key was first seen gone (monotonic).
  std::map<std::string, base::TimePoint> seen_gone_ ABSL_GUARDED_BY(mu_);
};

}  // namespace controller
