// A client of etcd's v3 gRPC API (proto/etcd) over a list of members: every
// unary call with a deadline, moved on to the next member when the one in use
// is unreachable; and the members' channels and stubs, for the streams
// (Watch, LeaseKeepAlive) a caller keeps open itself.
//
// A write retried on the next member after UNAVAILABLE may have landed on the
// first one (etcd answers UNAVAILABLE to a proposal that timed out and may
// still commit): as after a deadline, the caller re-reads. Writes guarded by
// a Compare (EtcdStore's) are never applied twice; the retry reports the
// compare failed.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "base/tls.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"

namespace etcd {

struct EtcdOptions {
  // HOST:PORT of each member's client URL, tried in this order.
  std::vector<std::string> endpoints;
  // The deadline of every unary call (of each attempt, one per member).
  std::chrono::milliseconds call_timeout{5000};
  // Reconnects (gRPC's to a member, a caller's stream) wait this long first,
  // doubling up to backoff_max while they keep failing.
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{5000};
  // Mutual TLS to the members (https client URLs); plaintext when not enabled.
  base::ClientSecurity security;
  // Interceptors on every member's channel (fresh ones per channel): tests
  // lose or delay etcd's answers with them. None in production.
  std::function<
      std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>()>
      interceptors;
};

// "etcd://HOST:PORT[,HOST:PORT...][/PREFIX]": the endpoints, and the key
// prefix ("" or "/PREFIX" without a trailing slash). InvalidArgument saying
// what is wrong otherwise.
struct EtcdUrl {
  std::vector<std::string> endpoints;
  std::string prefix;
};
absl::StatusOr<EtcdUrl> ParseEtcdUrl(absl::string_view url);

// The range_end that makes a range every key starting with `prefix`.
std::string PrefixRangeEnd(absl::string_view prefix);

// Metadata for a stream: a member without a leader (cut off from the others)
// ends it with UNAVAILABLE instead of keeping it open, silent, forever.
inline constexpr char kRequireLeaderKey[] = "hasleader";
inline constexpr char kRequireLeaderValue[] = "true";

class EtcdClient {
 public:
  // A connection to one member. Replaced by a new one when a call or stream
  // on it fails: a channel that tried to connect while the member was
  // starting (etcd listens long before it serves) was seen failing every
  // call at once for 10 s after the member served (no call waits on a
  // failed channel, so nothing drives its reconnection but gRPC's 5 s
  // backup poller).
  struct Member {
    std::string endpoint;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Watch::Stub> watch;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  };
  struct InUse {
    size_t index = 0;
    std::shared_ptr<const Member> member;
  };

  // No I/O: a member's channel connects on first use. InvalidArgument
  // without endpoints.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdOptions options);

  const EtcdOptions& options() const { return options_; }

  // Each on the member in use, then, on UNAVAILABLE, on the next ones (each
  // tried once). A deadline moves on to the next member for the next call
  // but is returned: the call may have been applied. Errors are etcd's
  // codes, the message naming the member.
  absl::StatusOr<etcdserverpb::RangeResponse> Range(const etcdserverpb::RangeRequest& request);
  absl::StatusOr<etcdserverpb::PutResponse> Put(const etcdserverpb::PutRequest& request);
  absl::StatusOr<etcdserverpb::DeleteRangeResponse> DeleteRange(
      const etcdserverpb::DeleteRangeRequest& request);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& request);
  absl::StatusOr<etcdserverpb::CompactionResponse> Compact(
      const etcdserverpb::CompactionRequest& request);
  absl::StatusOr<etcdserverpb::LeaseGrantResponse> LeaseGrant(
      const etcdserverpb::LeaseGrantRequest& request);
  absl::StatusOr<etcdserverpb::LeaseRevokeResponse> LeaseRevoke(
      const etcdserverpb::LeaseRevokeRequest& request);
  absl::StatusOr<etcdserverpb::LeaseTimeToLiveResponse> LeaseTimeToLive(
      const etcdserverpb::LeaseTimeToLiveRequest& request);

  // For a stream (Watch, LeaseKeepAlive): the member in use. Wait for its
  // channel to connect (WaitForConnected, within call_timeout), open the
  // stream with kRequireLeaderKey metadata, and call Failed(index) when
  // either fails. The member stays valid while held.
  InUse Current() const;
  // Moves on from member `index` (a call or stream on it failed) unless
  // another caller already has (concurrent failures skip no member), and
  // gives it a new connection.
  void Failed(size_t index);

 private:
  explicit EtcdClient(EtcdOptions options);
  std::shared_ptr<const Member> Connect(const std::string& endpoint) const;

  template <typename Response, typename Call>
  absl::StatusOr<Response> Unary(const char* method, const Call& call);

  const EtcdOptions options_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<const Member>> members_ ABSL_GUARDED_BY(mu_);
  size_t current_ ABSL_GUARDED_BY(mu_) = 0;
};

// Every key under `prefix` in key order, read `page_size` at a time at one
// revision (a consistent snapshot however many there are), and that revision.
// 500 a page: well under gRPC's 4 MiB message limit for records of a few KiB.
struct PrefixListing {
  std::vector<mvccpb::KeyValue> kvs;
  int64_t revision = 0;
};
absl::StatusOr<PrefixListing> ListPrefix(EtcdClient& client, const std::string& prefix,
                                         bool keys_only, int64_t page_size = 500);

// A lease of `ttl_seconds` (etcd may round a short one up: see its ttl()).
// An error etcd states in the answer is UNAVAILABLE.
absl::StatusOr<etcdserverpb::LeaseGrantResponse> GrantLease(EtcdClient& client,
                                                            int64_t ttl_seconds);

// Makes `op` a Put of `key` = `value` attached to `lease` (0: none).
void SetPut(etcdserverpb::RequestOp& op, const std::string& key, const std::string& value,
            int64_t lease = 0);

// A Txn compare: `key`'s create_revision is `revision` (0: the key is
// absent).
etcdserverpb::Compare CreateRevisionIs(const std::string& key, int64_t revision);

// Revokes a lease granted for an attempt that took nothing with it. Best
// effort: unrevoked, it expires with its TTL, holding no key.
void RevokeUnusedLease(EtcdClient& client, int64_t lease);

// A deadline on `clock` (a keeper's monotonic clock) as the wall-clock time
// point gRPC takes.
std::chrono::system_clock::time_point WallDeadline(const base::TimeSource& clock,
                                                   base::TimePoint deadline);

// DEADLINE_EXCEEDED ("<what> ran out of time") once `clock` reached
// `deadline`, else OK: a lease attempt starts no new call past its deadline.
absl::Status DeadlineLeft(const base::TimeSource& clock, base::TimePoint deadline,
                          absl::string_view what);

// Waits out the holder of `key`, a key held with an etcd lease: true once the
// key is gone and so is the lease that held it, false when `deadline` (on
// `clock`) came first or the watch ended without news (a compacted start
// revision: the next call reads again). UNAVAILABLE when the member failed
// (the client moves on to the next one). A read, then a Watch from just past
// it, so no delete between the two is missed. *holder_lease is the lease
// last seen holding the key (kept across calls; 0: none known; set by a
// failed attempt's read too): the key deleted is not enough, since deleted by
// hand (etcdctl del) its holder acts on until its own renewal notices; only
// the lease gone (expired or revoked) means the holder has stopped, or stops
// within its fence margin. For a successor waiting out a lease holder (a
// serving lease, the controller's leadership).
absl::StatusOr<bool> WaitHolderGone(EtcdClient& client, const std::string& key,
                                    int64_t* holder_lease, const base::TimeSource& clock,
                                    base::TimePoint deadline);

}  // namespace etcd
