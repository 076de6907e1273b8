#include "sharemgr/etcd_lease_backend.h"

#include <spdlog/spdlog.h>

#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "etcd/client.h"
#include "etcd/lease_keep_alive.h"

namespace sharemgr {
namespace {

using etcdserverpb::Compare;
using Attempt = LeaseBackend::Attempt;
using Renewal = LeaseBackend::Renewal;

// The epoch a key's value starts with ("<20 digits>[ <holder>]"), or nullopt.
std::optional<uint64_t> EpochOf(const std::string& value) {
  uint64_t epoch = 0;
  if (value.size() < 20 || !absl::SimpleAtoi(value.substr(0, 20), &epoch)) return std::nullopt;
  return epoch;
}

std::string HolderOf(const std::string& value) {
  return value.size() > 21 ? value.substr(21) : std::string("?");
}

Compare CreateRevisionIsZero(const std::string& key) {
  Compare c;
  c.set_key(key);
  c.set_target(Compare::CREATE);
  c.set_result(Compare::EQUAL);
  c.set_create_revision(0);
  return c;
}

Compare ValueLess(const std::string& key, const std::string& value) {
  Compare c;
  c.set_key(key);
  c.set_target(Compare::VALUE);
  c.set_result(Compare::LESS);
  c.set_value(value);
  return c;
}

class EtcdLeaseBackend final : public LeaseBackend {
 public:
  EtcdLeaseBackend(std::unique_ptr<etcd::EtcdClient> client, const LeaseConfig& config,
                   const base::TimeSource& clock)
      : client_(std::move(client)),
        clock_(clock),
        lease_key_(LeaseKey(config)),
        epoch_key_(EpochKey(config)),
        epoch_(config.options.epoch),
        value_(absl::StrCat(PaddedEpoch(epoch_), " ", config.holder)),
        keep_alive_(*client_) {}

  absl::StatusOr<Attempt> TryAcquire(int64_t ttl_seconds, base::TimePoint deadline) override;
  absl::StatusOr<bool> WaitReleased(base::TimePoint deadline) override;
  absl::StatusOr<Renewal> KeepAlive(base::TimePoint deadline) override;
  absl::Status Revoke(base::TimePoint deadline) override;

 private:
  // The keeper's monotonic deadline on the wall clock gRPC takes.
  std::chrono::system_clock::time_point WallDeadline(base::TimePoint deadline) const {
    return std::chrono::system_clock::now() +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(deadline - clock_.Now());
  }
  // Revokes a lease granted for an attempt that did not take the key.
  void RevokeUnused(int64_t lease);
  absl::StatusOr<Attempt> Judge(const etcdserverpb::TxnResponse& response, int64_t lease,
                                int64_t granted_ttl, bool* try_value_form);

  // Every member call goes through it; only the keeper's thread calls.
  const std::unique_ptr<etcd::EtcdClient> client_;
  const base::TimeSource& clock_;
  const std::string lease_key_, epoch_key_;
  const uint64_t epoch_;
  const std::string value_;  // the lease key's: "<epoch> <holder>"
  etcd::LeaseKeepAliveStream keep_alive_;
  int64_t lease_ = 0;  // the lease taken, 0 before (keeper thread only)
};

void EtcdLeaseBackend::RevokeUnused(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest revoke;
  revoke.set_id(lease);
  // Best effort: unrevoked, it expires with its TTL, holding no key.
  if (auto s = client_->LeaseRevoke(revoke); !s.ok()) {
    spdlog::debug("revoking unused etcd lease {:x}: {}", lease, s.status().ToString());
  }
}

absl::StatusOr<Attempt> EtcdLeaseBackend::TryAcquire(int64_t ttl_seconds,
                                                     base::TimePoint deadline) {
  (void)deadline;  // each call is bounded by the client's call timeout (the same bound)
  etcdserverpb::LeaseGrantRequest grant;
  grant.set_ttl(ttl_seconds);
  auto granted = client_->LeaseGrant(grant);
  if (!granted.ok()) return granted.status();
  if (!granted->error().empty()) return absl::UnavailableError(granted->error());
  const int64_t lease = granted->id();
  // etcd compares are ANDed: one transaction for "no epoch recorded yet",
  // one for "the recorded epoch is lower" (a VALUE compare on a missing key
  // is false).
  for (const bool value_form : {false, true}) {
    etcdserverpb::TxnRequest txn;
    *txn.add_compare() = CreateRevisionIsZero(lease_key_);
    *txn.add_compare() =
        value_form ? ValueLess(epoch_key_, PaddedEpoch(epoch_)) : CreateRevisionIsZero(epoch_key_);
    auto* put_epoch = txn.add_success()->mutable_request_put();
    put_epoch->set_key(epoch_key_);
    put_epoch->set_value(PaddedEpoch(epoch_));
    auto* put_lease = txn.add_success()->mutable_request_put();
    put_lease->set_key(lease_key_);
    put_lease->set_value(value_);
    put_lease->set_lease(lease);
    txn.add_failure()->mutable_request_range()->set_key(lease_key_);
    txn.add_failure()->mutable_request_range()->set_key(epoch_key_);
    auto response = client_->Txn(txn);
    if (!response.ok()) {
      RevokeUnused(lease);
      return response.status();
    }
    bool try_value_form = false;
    auto attempt = Judge(*response, lease, granted->ttl(), &try_value_form);
    if (try_value_form && !value_form) continue;
    if (!attempt.ok() || attempt->outcome != Attempt::Outcome::kTaken) RevokeUnused(lease);
    return attempt;
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<Attempt> EtcdLeaseBackend::Judge(const etcdserverpb::TxnResponse& response,
                                                int64_t lease, int64_t granted_ttl,
                                                bool* try_value_form) {
  const auto taken = [&] {
    lease_ = lease;
    return Attempt{.outcome = Attempt::Outcome::kTaken, .granted_ttl_seconds = granted_ttl};
  };
  if (response.succeeded()) return taken();
  const mvccpb::KeyValue* holder = nullptr;
  const mvccpb::KeyValue* recorded = nullptr;
  for (const auto& op : response.responses()) {
    for (const auto& kv : op.response_range().kvs()) {
      if (kv.key() == lease_key_) holder = &kv;
      if (kv.key() == epoch_key_) recorded = &kv;
    }
  }
  // A retry of a transaction that landed the first time (the client moves
  // on to the next member after UNAVAILABLE): the key is on our lease.
  if (holder != nullptr && holder->lease() == lease) return taken();
  if (recorded != nullptr) {
    const auto epoch = EpochOf(recorded->value());
    if (!epoch) {
      return absl::FailedPreconditionError(
          absl::StrCat(epoch_key_, " holds '", recorded->value(), "', not an epoch"));
    }
    if (*epoch >= epoch_) {
      return Attempt{.outcome = Attempt::Outcome::kSuperseded, .other_epoch = *epoch};
    }
  }
  if (holder != nullptr) {
    return Attempt{.outcome = Attempt::Outcome::kHeldByOther,
                   .other_epoch = EpochOf(holder->value()).value_or(0),
                   .other_holder = HolderOf(holder->value())};
  }
  // Neither held nor superseded: a lower epoch is recorded (the first form
  // failed on it), or the keys changed between the compare and now.
  *try_value_form = true;
  return absl::UnavailableError(
      absl::StrCat("the keys of ", lease_key_, " changed while taking it; trying again"));
}

absl::StatusOr<bool> EtcdLeaseBackend::WaitReleased(base::TimePoint deadline) {
  return etcd::WaitKeyDeleted(*client_, lease_key_, WallDeadline(deadline));
}

absl::StatusOr<Renewal> EtcdLeaseBackend::KeepAlive(base::TimePoint deadline) {
  auto kept = etcd::KeepAliveHoldingKey(keep_alive_, *client_, lease_, lease_key_, value_,
                                        WallDeadline(deadline));
  if (!kept.ok()) return kept.status();
  Renewal renewal{.ttl_seconds = kept->ttl_seconds, .key = kept->key};
  if (kept->key == Renewal::Key::kOther) renewal.key_epoch = EpochOf(kept->other).value_or(0);
  return renewal;
}

absl::Status EtcdLeaseBackend::Revoke(base::TimePoint deadline) {
  (void)deadline;  // bounded by the client's call timeout
  keep_alive_.Close();
  if (lease_ == 0) return absl::OkStatus();
  etcdserverpb::LeaseRevokeRequest revoke;
  revoke.set_id(lease_);
  auto revoked = client_->LeaseRevoke(revoke);
  if (!revoked.ok()) return revoked.status();
  lease_ = 0;
  return absl::OkStatus();
}

}  // namespace

std::string PaddedEpoch(uint64_t epoch) { return absl::StrFormat("%020u", epoch); }
std::string LeaseKey(const LeaseConfig& config) {
  return absl::StrCat(config.prefix, "/leases/", config.volume);
}
std::string EpochKey(const LeaseConfig& config) {
  return absl::StrCat(config.prefix, "/epochs/", config.volume);
}

absl::StatusOr<std::unique_ptr<LeaseBackend>> MakeEtcdLeaseBackend(const LeaseConfig& config,
                                                                   const base::TimeSource& clock) {
  auto client = etcd::EtcdClient::Create({
      .endpoints = config.endpoints,
      .call_timeout = LeaseCallTimeout(config.options.ttl),
  });
  if (!client.ok()) return client.status();
  return std::unique_ptr<LeaseBackend>(
      std::make_unique<EtcdLeaseBackend>(*std::move(client), config, clock));
}

}  // namespace sharemgr
