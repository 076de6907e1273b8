#include "controller/ha/serving_lease_gate.h"

#include "absl/strings/str_cat.h"

namespace controller {

ServingLeaseGate::ServingLeaseGate(PodRuntime& runtime, std::shared_ptr<etcd::EtcdClient> client,
                                   ServingLeaseGateOptions options, const base::TimeSource& clock)
    : runtime_(runtime),
      client_(std::move(client)),
      options_(std::move(options)),
      clock_(clock),
      rule_(options_.drift_margin, options_.poll) {}

absl::StatusOr<StartCheck> ServingLeaseGate::CheckStart(
    const sharemanager::controller::v1::ShareSpec& spec, uint64_t epoch) {
  const std::string lease_key = absl::StrCat(options_.prefix, "/leases/", spec.volume());
  const std::string epoch_key = absl::StrCat(options_.prefix, "/epochs/", spec.volume());
  // Both at one revision.
  etcdserverpb::TxnRequest txn;
  txn.add_success()->mutable_request_range()->set_key(lease_key);
  txn.add_success()->mutable_request_range()->set_key(epoch_key);
  auto read = client_->Txn(txn);
  if (!read.ok()) return read.status();
  const auto value = [&](int i) -> std::optional<std::string> {
    const auto& kvs = read->responses(i).response_range().kvs();
    if (kvs.empty()) return std::nullopt;
    return kvs[0].value();
  };
  ServingLeaseKeys keys{.holder = value(0), .recorded = value(1)};
  if (const auto lease = RecordedLeaseToAsk(keys)) {
    // The key is gone; the holder the record names may not be (its key
    // deleted by hand): its etcd lease says.
    etcdserverpb::LeaseTimeToLiveRequest ask;
    ask.set_id(*lease);
    auto ttl = client_->LeaseTimeToLive(ask);
    if (!ttl.ok()) return ttl.status();
    keys.recorded_lease_ttl = ttl->ttl();
  }
  const base::TimePoint now = clock_.Now();
  absl::MutexLock lock(&mu_);
  return rule_.Check(spec.volume(), epoch, keys, now);
}

}  // namespace controller
