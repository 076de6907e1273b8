#include "sharemgr/etcd_lease_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <vector>

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
  // After the key is gone: true once the holder's lease is gone too;
  // false (after waiting up to `deadline`) while it lives.
  absl::StatusOr<bool> AwaitedLeaseGone(base::TimePoint deadline);
  absl::StatusOr<Attempt> Judge(const etcdserverpb::TxnResponse& response, int64_t lease,
                                int64_t granted_ttl, base::TimePoint deadline,
                                bool* try_value_form);
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
  // The lease of the older holder we wait out. Its key deleted is not
  // enough: deleted by hand (etcdctl del), the holder still serves until its
  // own renewal notices; only the lease gone (expired or revoked) means it
  // has stopped, or stops within its fence margin.
  int64_t awaited_lease_ = 0;
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
  // Each call is bounded by the client's call timeout (per member tried);
  // no new call starts past `deadline`, and an adopted lease's keep-alive
  // ends by it.
  const auto past_deadline = [&] {
    return clock_.Now() >= deadline
               ? absl::DeadlineExceededError("taking the serving lease ran out of time")
               : absl::OkStatus();
  };
  etcdserverpb::LeaseGrantRequest grant;
  grant.set_ttl(ttl_seconds);
  auto granted = client_->LeaseGrant(grant);
  if (!granted.ok()) return granted.status();
  if (!granted->error().empty()) return absl::UnavailableError(granted->error());
  const int64_t lease = granted->id();
  if (auto late = past_deadline(); !late.ok()) {
    RevokeUnused(lease);  // it holds no key yet
    return late;
  }
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
      unsettled_.push_back(lease);
      return response.status();
    }
    bool try_value_form = false;
    auto attempt = Judge(*response, lease, granted->ttl(), deadline, &try_value_form);
    if (try_value_form && !value_form) {
      if (auto late = past_deadline(); !late.ok()) {
        RevokeUnused(lease);
        return late;
      }
      continue;
    }
    if (!attempt.ok() || attempt->outcome != Attempt::Outcome::kTaken) RevokeUnused(lease);
    return attempt;
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<Attempt> EtcdLeaseBackend::Judge(const etcdserverpb::TxnResponse& response,
                                                int64_t lease, int64_t granted_ttl,
                                                base::TimePoint deadline, bool* try_value_form) {
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

Attempt EtcdLeaseBackend::Taken(int64_t lease, int64_t ttl) {
  lease_ = lease;
  for (const int64_t other : unsettled_) {
    if (other != lease) RevokeUnused(other);
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
  RevokeUnused(fresh);
  return Taken(unsettled, kept->ttl());
}

absl::StatusOr<bool> EtcdLeaseBackend::AwaitedLeaseGone(base::TimePoint deadline) {
  if (awaited_lease_ == 0) return true;
  etcdserverpb::LeaseTimeToLiveRequest ask;
  ask.set_id(awaited_lease_);
  auto ttl = client_->LeaseTimeToLive(ask);
  if (!ttl.ok()) return ttl.status();
  if (ttl->ttl() <= 0) {
    awaited_lease_ = 0;
    return true;
  }
  spdlog::warn(
      "serving lease key deleted while its holder's etcd lease {:x} lives ({} s left): waiting "
      "for the lease, not the key",
      awaited_lease_, ttl->ttl());
  // Asked again in the next slice: a revoke ends the wait early.
  const auto slice =
      std::min<base::Duration>(std::chrono::seconds(ttl->ttl()),
                               std::chrono::duration_cast<base::Duration>(deadline - clock_.Now()));
  if (slice > base::Duration::zero()) std::this_thread::sleep_for(slice);
  return false;
}

absl::StatusOr<bool> EtcdLeaseBackend::WaitReleased(base::TimePoint deadline) {
  etcdserverpb::RangeRequest get;
  get.set_key(lease_key_);
  auto now = client_->Range(get);
  if (!now.ok()) return now.status();
  if (now->kvs().empty()) return AwaitedLeaseGone(deadline);
  awaited_lease_ = now->kvs(0).lease();  // the holder now (another may have taken over)
  // Watch from just past that read: no delete between the two is missed.
  const etcd::EtcdClient::InUse member = client_->Current();
  if (!member.member->channel->WaitForConnected(WallDeadline(deadline))) {
    client_->Failed(member.index);
    return false;  // the next slice tries the next member
  }
  grpc::ClientContext context;
  context.AddMetadata(etcd::kRequireLeaderKey, etcd::kRequireLeaderValue);
  context.set_deadline(WallDeadline(deadline));
  auto stream = member.member->watch->Watch(&context);
  etcdserverpb::WatchRequest watch;
  auto* create = watch.mutable_create_request();
  create->set_key(lease_key_);
  create->set_start_revision(now->header().revision() + 1);
  bool released = false;
  if (stream->Write(watch)) {
    etcdserverpb::WatchResponse response;
    while (!released && stream->Read(&response)) {
      // A compacted start revision: read again next time.
      if (response.compact_revision() != 0 || response.canceled()) break;
      for (const auto& event : response.events()) {
        if (event.type() == mvccpb::Event::DELETE) released = true;
      }
    }
  }
  context.TryCancel();
  const grpc::Status status = stream->Finish();
  if (released) return AwaitedLeaseGone(deadline);
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
      status.error_code() == grpc::StatusCode::CANCELLED || status.ok()) {
    return false;
  }
  client_->Failed(member.index);
  return absl::UnavailableError(
      absl::StrCat("etcd Watch on ", member.member->endpoint, ": ", status.error_message()));
}

absl::StatusOr<Renewal> EtcdLeaseBackend::KeepAlive(base::TimePoint deadline) {
  auto kept = keep_alive_.KeepAlive(lease_, WallDeadline(deadline));
  if (!kept.ok()) return kept.status();
  Renewal renewal{.ttl_seconds = kept->ttl()};
  if (renewal.ttl_seconds <= 0) return renewal;
  // Renewed; and the key still ours? (Deleted by hand, it would not be
  // noticed by the lease.)
  etcdserverpb::RangeRequest get;
  get.set_key(lease_key_);
  auto key = client_->Range(get);
  if (!key.ok()) return key.status();
  if (key->kvs().empty()) {
    renewal.key = Renewal::Key::kGone;
  } else if (const auto& kv = key->kvs(0); kv.lease() != lease_ || kv.value() != value_) {
    renewal.key = Renewal::Key::kOther;
    renewal.key_epoch = EpochOf(kv.value()).value_or(0);
  }
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

etcd::EtcdOptions LeaseClientOptions(const LeaseConfig& config) {
  return {.endpoints = config.endpoints, .call_timeout = LeaseCallTimeout(config.options.ttl)};
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
