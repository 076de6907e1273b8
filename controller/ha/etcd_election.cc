#include "controller/ha/etcd_election.h"

#include "absl/strings/str_cat.h"
#include "etcd/lease_keep_alive.h"

namespace controller {
namespace {

using Campaign = ElectionBackend::Campaign;

class EtcdElectionBackend final : public ElectionBackend {
 public:
  EtcdElectionBackend(std::shared_ptr<etcd::EtcdClient> client, const std::string& prefix,
                      std::string id, const base::TimeSource& clock)
      : client_(std::move(client)),
        clock_(clock),
        key_(LeaderKey(prefix)),
        id_(std::move(id)),
        keep_alive_(*client_) {}

  absl::StatusOr<Campaign> TryLead(int64_t ttl_seconds, base::TimePoint deadline) override;
  absl::StatusOr<bool> WaitVacant(base::TimePoint deadline) override {
    return etcd::WaitHolderGone(*client_, key_, &leader_lease_, clock_, deadline);
  }
  absl::StatusOr<etcd::LeaseRenewal> KeepAlive(base::TimePoint deadline) override {
    return etcd::KeepAliveHoldingKey(keep_alive_, *client_, lease_, key_, id_,
                                     etcd::WallDeadline(clock_, deadline));
  }
  absl::Status Resign(base::TimePoint deadline) override;

 private:
  // Every member call goes through it; only the keeper's thread calls
  // (unary calls are bounded by the client's call timeout).
  const std::shared_ptr<etcd::EtcdClient> client_;
  const base::TimeSource& clock_;
  const std::string key_, id_;
  etcd::LeaseKeepAliveStream keep_alive_;
  int64_t lease_ = 0;  // the lease won with, 0 before (keeper thread only)
  // The leader's lease a follower waits out (etcd::WaitHolderGone: the key
  // deleted by hand is not enough; keeper thread only).
  int64_t leader_lease_ = 0;
};

absl::StatusOr<Campaign> EtcdElectionBackend::TryLead(int64_t ttl_seconds,
                                                      base::TimePoint deadline) {
  // Each call is bounded by the client's call timeout (per member tried); no
  // new call starts past `deadline`.
  auto granted = etcd::GrantLease(*client_, ttl_seconds);
  if (!granted.ok()) return granted.status();
  const int64_t lease = granted->id();
  if (auto late = etcd::DeadlineLeft(clock_, deadline, "campaigning"); !late.ok()) {
    etcd::RevokeUnusedLease(*client_, lease);  // it holds no key yet
    return late;
  }
  etcdserverpb::TxnRequest txn;
  *txn.add_compare() = etcd::CreateRevisionIs(key_, 0);
  etcd::SetPut(*txn.add_success(), key_, id_, lease);
  txn.add_success()->mutable_request_range()->set_key(key_);
  txn.add_failure()->mutable_request_range()->set_key(key_);
  auto response = client_->Txn(txn);
  if (!response.ok()) {
    etcd::RevokeUnusedLease(*client_, lease);
    return response.status();
  }
  const auto& read = response->responses(response->succeeded() ? 1 : 0).response_range();
  // Won, or a retry of a transaction that landed the first time (the client
  // moves on to the next member after UNAVAILABLE): the key is on our lease.
  if (!read.kvs().empty() && read.kvs(0).lease() == lease) {
    lease_ = lease;
    return Campaign{
        .won = true, .token = read.kvs(0).create_revision(), .granted_ttl_seconds = granted->ttl()};
  }
  etcd::RevokeUnusedLease(*client_, lease);
  // Gone again since the compare: the follower finds it vacant at once.
  if (read.kvs().empty()) return Campaign{.won = false};
  leader_lease_ = read.kvs(0).lease();
  return Campaign{.won = false, .leader = read.kvs(0).value()};
}

absl::Status EtcdElectionBackend::Resign(base::TimePoint deadline) {
  (void)deadline;  // bounded by the client's call timeout
  return etcd::RevokeKeptLease(keep_alive_, *client_, &lease_);
}

}  // namespace

std::string LeaderKey(const std::string& prefix) { return prefix + "/leader"; }

WriteGuard LeaderWriteGuard(const std::string& prefix, int64_t token) {
  return WriteGuard{
      .key = LeaderKey(prefix), .field = WriteGuard::Field::kCreateRevision, .revision = token};
}

std::unique_ptr<ElectionBackend> MakeEtcdElectionBackend(std::shared_ptr<etcd::EtcdClient> client,
                                                         const std::string& prefix,
                                                         const std::string& id,
                                                         const base::TimeSource& clock) {
  return std::make_unique<EtcdElectionBackend>(std::move(client), prefix, id, clock);
}

}  // namespace controller
