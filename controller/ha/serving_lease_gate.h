// Lease-gated replacement (docs/DESIGN-NOTES.md "Highly available share-controller"): when
// share-managers run with the serving lease (--lease-etcd), a new pod of a
// volume starts only once the previous holder's lease key P/leases/<volume>
// and the etcd lease P/epochs/<volume> records for it are gone in etcd and
// the drift margin has passed since this controller saw them gone, and only
// under an epoch above the recorded one (the rule and its formula:
// controller/ha/serving_lease_start_rule.h).
//
// A wrapper of the runtime: its CheckStart reads both keys (one Txn), then,
// the key absent, the recorded lease's TTL (LeaseTimeToLive); Create,
// Delete, List and Watch go straight through. The volume's first pod ever
// (P/epochs/<volume> absent) starts at once.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "controller/ha/serving_lease_start_rule.h"
#include "controller/runtime/pod_runtime.h"
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

  // ServingLeaseStartRule::Check on what etcd holds now.
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
  ServingLeaseStartRule rule_ ABSL_GUARDED_BY(mu_);
};

}  // namespace controller
