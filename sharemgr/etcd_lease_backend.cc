#include "sharemgr/etcd_lease_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "etcd/client.h"
#include "etcd/lease_keep_alive.h"
#include "etcd/serving_lease_record.h"

namespace sharemgr {
namespace {

using etcdserverpb::Compare;
using Attempt = LeaseBackend::Attempt;
using Renewal = LeaseBackend::Renewal;
using etcd::EpochOf;
using etcd::EpochRecord;
using etcd::HolderOf;
using etcd::RecordedLeaseOf;

Compare ValueIs(const std::string& key, const std::string& value) {
  Compare c;
  c.set_key(key);
  c.set_target(Compare::VALUE);
  c.set_result(Compare::EQUAL);
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
    return etcd::WallDeadline(clock_, deadline);
  }
  // *earlier_record: the epoch record to replace when the first form failed
  // on a lower epoch recorded with the key absent (then *try_value_form).
  absl::StatusOr<Attempt> Judge(const etcdserverpb::TxnResponse& response, int64_t lease,
                                int64_t granted_ttl, base::TimePoint deadline, bool* try_value_form,
                                std::string* earlier_record);
  // The key is absent and `record` names a lower epoch: its holder may still
  // serve (its key deleted by hand, etcdctl del, while its etcd lease lives:
  // it acts on until its next renewal reads the key). nullopt once that
  // holder has stopped, else kHeldByOther (WaitReleased waits it out).
  absl::StatusOr<std::optional<Attempt>> EarlierHolderLives(const std::string& record,
                                                            int64_t ttl_seconds);
  // The key is on the lease of an earlier attempt whose transaction failed
  // on our side but landed in etcd: ours, once a keep-alive sent now renews it.
  absl::StatusOr<Attempt> Adopt(int64_t unsettled, int64_t fresh, base::TimePoint deadline);
  // The lease is taken: the leases of earlier unsettled attempts hold no key.
  Attempt Taken(int64_t lease, int64_t ttl);

  // Every member call goes through it; only the keeper's thread calls.
  const std::unique_ptr<etcd::EtcdClient> client_;
  const base::TimeSource& clock_;
  const std::string lease_key_, epoch_key_;
  const uint64_t epoch_;
  const std::string value_;  // the lease key's: "<epoch> <holder>"
  etcd::LeaseKeepAliveStream keep_alive_;
  int64_t lease_ = 0;  // the lease taken, 0 before (keeper thread only)
  // Leases granted for attempts whose transaction got no answer: it may have
  // landed (etcd applies a proposal after the client gave up), putting the
  // key on one of them. Never revoked while unsettled: revoking would delete
  // our own key, and the epoch recorded with it would then refuse us for good.
  std::vector<int64_t> unsettled_;
  // The lease of the older holder we wait out (etcd::WaitHolderGone: its
  // key deleted is not enough).
  int64_t awaited_lease_ = 0;
  // An epoch record naming no lease (written before records named one): its
  // holder cannot be asked about, so it is waited out for a whole TTL from
  // when its key was first seen absent (any renewal it sends later reads the
  // key gone: etcd::KeepAliveHoldingKey), then the keeper's drift margin.
  std::string unknown_holder_record_;
  base::TimePoint unknown_holder_until_{};
};

absl::StatusOr<Attempt> EtcdLeaseBackend::TryAcquire(int64_t ttl_seconds,
                                                     base::TimePoint deadline) {
  // Each call is bounded by the client's call timeout (per member tried);
  // no new call starts past `deadline`, and an adopted lease's keep-alive
  // ends by it.
  const auto past_deadline = [&] {
    return etcd::DeadlineLeft(clock_, deadline, "taking the serving lease");
  };
  auto granted = etcd::GrantLease(*client_, ttl_seconds);
  if (!granted.ok()) return granted.status();
  const int64_t lease = granted->id();
  if (auto late = past_deadline(); !late.ok()) {
    etcd::RevokeUnusedLease(*client_, lease);  // it holds no key yet
    return late;
  }
  // etcd compares are ANDed: one transaction for "no epoch recorded yet",
  // one for "the recorded epoch is lower" (a VALUE compare on a missing key
  // is false).
  // The value form replaces only the record judged (a lower epoch whose
  // holder has stopped): any change since fails it.
  std::string earlier_record;
  for (const bool value_form : {false, true}) {
    etcdserverpb::TxnRequest txn;
    *txn.add_compare() = etcd::CreateRevisionIs(lease_key_, 0);
    *txn.add_compare() =
        value_form ? ValueIs(epoch_key_, earlier_record) : etcd::CreateRevisionIs(epoch_key_, 0);
    // The record names our etcd lease: a later epoch finding our key gone
    // waits for that lease, not only the key (EarlierHolderLives).
    etcd::SetPut(*txn.add_success(), epoch_key_, EpochRecord(epoch_, lease));
    etcd::SetPut(*txn.add_success(), lease_key_, value_, lease);
    txn.add_failure()->mutable_request_range()->set_key(lease_key_);
    txn.add_failure()->mutable_request_range()->set_key(epoch_key_);
    auto response = client_->Txn(txn);
    if (!response.ok()) {
      unsettled_.push_back(lease);
      return response.status();
    }
    bool try_value_form = false;
    auto attempt =
        Judge(*response, lease, granted->ttl(), deadline, &try_value_form, &earlier_record);
    if (try_value_form && !value_form) {
      if (auto late = past_deadline(); !late.ok()) {
        etcd::RevokeUnusedLease(*client_, lease);
        return late;
      }
      auto lives = EarlierHolderLives(earlier_record, ttl_seconds);
      if (!lives.ok() || lives->has_value()) {
        etcd::RevokeUnusedLease(*client_, lease);
        if (!lives.ok()) return lives.status();
        return **lives;
      }
      continue;
    }
    if (!attempt.ok() || attempt->outcome != Attempt::Outcome::kTaken) {
      etcd::RevokeUnusedLease(*client_, lease);
    }
    return attempt;
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<Attempt> EtcdLeaseBackend::Judge(const etcdserverpb::TxnResponse& response,
                                                int64_t lease, int64_t granted_ttl,
                                                base::TimePoint deadline, bool* try_value_form,
                                                std::string* earlier_record) {
  if (response.succeeded()) return Taken(lease, granted_ttl);
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
  if (holder != nullptr && holder->lease() == lease) return Taken(lease, granted_ttl);
  if (holder != nullptr && holder->value() == value_ &&
      std::find(unsettled_.begin(), unsettled_.end(), holder->lease()) != unsettled_.end()) {
    return Adopt(holder->lease(), lease, deadline);
  }
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
    awaited_lease_ = holder->lease();
    unknown_holder_record_.clear();  // WaitReleased watches this holder
    return Attempt{.outcome = Attempt::Outcome::kHeldByOther,
                   .other_epoch = EpochOf(holder->value()).value_or(0),
                   .other_holder = HolderOf(holder->value())};
  }
  // Neither held nor superseded: a lower epoch is recorded (the first form
  // failed on it), or the keys changed between the compare and now.
  *try_value_form = true;
  *earlier_record = recorded != nullptr ? recorded->value() : std::string();
  return absl::UnavailableError(
      absl::StrCat("the keys of ", lease_key_, " changed while taking it; trying again"));
}

absl::StatusOr<std::optional<Attempt>> EtcdLeaseBackend::EarlierHolderLives(
    const std::string& record, int64_t ttl_seconds) {
  if (record.empty()) return std::nullopt;  // no record: the value form fails and says why
  const Attempt lives{.outcome = Attempt::Outcome::kHeldByOther,
                      .other_epoch = EpochOf(record).value_or(0),
                      .other_holder = "its key gone, its holder maybe not yet"};
  const std::optional<int64_t> recorded_lease = RecordedLeaseOf(record);
  if (!recorded_lease) {
    const base::TimePoint now = clock_.Now();
    if (unknown_holder_record_ != record) {
      unknown_holder_record_ = record;
      unknown_holder_until_ = now + std::chrono::seconds(ttl_seconds);
      spdlog::warn("{} records '{}', no etcd lease: waiting a whole TTL ({} s) for its holder",
                   epoch_key_, record, ttl_seconds);
    }
    if (now >= unknown_holder_until_) return std::nullopt;
    return lives;
  }
  unknown_holder_record_.clear();  // WaitReleased asks about this lease
  etcdserverpb::LeaseTimeToLiveRequest ask;
  ask.set_id(*recorded_lease);
  auto ttl = client_->LeaseTimeToLive(ask);
  if (!ttl.ok()) return ttl.status();
  // -1: etcd no longer knows the lease, so that holder has stopped. A TTL of
  // 0 is truncated to whole seconds and may leave most of a second: not yet
  // (the controller's gate reads it the same way).
  if (ttl->ttl() < 0) return std::nullopt;
  awaited_lease_ = *recorded_lease;
  return lives;
}

Attempt EtcdLeaseBackend::Taken(int64_t lease, int64_t ttl) {
  lease_ = lease;
  for (const int64_t other : unsettled_) {
    if (other != lease) etcd::RevokeUnusedLease(*client_, other);
  }
  unsettled_.clear();
  return Attempt{.outcome = Attempt::Outcome::kTaken, .granted_ttl_seconds = ttl};
}

absl::StatusOr<Attempt> EtcdLeaseBackend::Adopt(int64_t unsettled, int64_t fresh,
                                                base::TimePoint deadline) {
  // The keeper counts the lease from this attempt's start; the unsettled
  // lease was granted earlier, so only a keep-alive sent after that start
  // makes it last as long as the keeper will think.
  auto kept = keep_alive_.KeepAlive(unsettled, WallDeadline(deadline));
  if (!kept.ok()) return kept.status();
  if (kept->ttl() <= 0) {
    // It expired, and its key with it: the next attempt reads what is left.
    return absl::UnavailableError(
        absl::StrCat("our earlier attempt's lease ", absl::Hex(unsettled), " expired"));
  }
  spdlog::info("serving lease: an earlier attempt's transaction had landed; lease {:x} is ours",
               unsettled);
  etcd::RevokeUnusedLease(*client_, fresh);
  return Taken(unsettled, kept->ttl());
}

absl::StatusOr<bool> EtcdLeaseBackend::WaitReleased(base::TimePoint deadline) {
  if (!unknown_holder_record_.empty()) {
    // No lease to watch: the time is all there is (TryAcquire judges again).
    const base::TimePoint until = std::min(unknown_holder_until_, deadline);
    if (clock_.Now() < until) std::this_thread::sleep_for(until - clock_.Now());
    return clock_.Now() >= unknown_holder_until_;
  }
  return etcd::WaitHolderGone(*client_, lease_key_, &awaited_lease_, clock_, deadline);
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
  return etcd::RevokeKeptLease(keep_alive_, *client_, &lease_);
}

}  // namespace

std::string LeaseKey(const LeaseConfig& config) {
  return absl::StrCat(config.prefix, "/leases/", config.volume);
}
std::string EpochKey(const LeaseConfig& config) {
  return absl::StrCat(config.prefix, "/epochs/", config.volume);
}

etcd::EtcdOptions LeaseClientOptions(const LeaseConfig& config) {
  return {.endpoints = config.endpoints,
          .call_timeout = LeaseCallTimeout(config.options.ttl),
          .security = base::MakeClientSecurity(config.tls, config.tls_server_name)};
}

absl::StatusOr<std::unique_ptr<LeaseBackend>> MakeEtcdLeaseBackend(const LeaseConfig& config,
                                                                   const base::TimeSource& clock) {
  return MakeEtcdLeaseBackend(config, clock, LeaseClientOptions(config));
}

absl::StatusOr<std::unique_ptr<LeaseBackend>> MakeEtcdLeaseBackend(
    const LeaseConfig& config, const base::TimeSource& clock, etcd::EtcdOptions client_options) {
  auto client = etcd::EtcdClient::Create(std::move(client_options));
  if (!client.ok()) return client.status();
  return std::unique_ptr<LeaseBackend>(
      std::make_unique<EtcdLeaseBackend>(*std::move(client), config, clock));
}

}  // namespace sharemgr
