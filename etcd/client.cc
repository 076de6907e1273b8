#include "etcd/client.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace etcd {
namespace {

// etcd refuses pings more often than every 5 s (--grpc-keepalive-min-time)
// with a GOAWAY; every 10 s on an open stream notices a member that hangs
// behind an open connection within 10 s + call_timeout.
constexpr int kKeepaliveMs = 10'000;

absl::Status CheckEndpoint(absl::string_view endpoint) {
  const auto colon = endpoint.rfind(':');
  uint32_t port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(endpoint.substr(colon + 1), &port) || port == 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd endpoint '", endpoint, "' is not HOST:PORT (PORT 1-65535)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EtcdUrl> ParseEtcdUrl(absl::string_view url) {
  constexpr absl::string_view kScheme = "etcd://";
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", url, "' is not etcd://HOST:PORT[,HOST:PORT...][/PREFIX]: ", why));
  };
  if (!absl::StartsWith(url, kScheme)) return bad("no etcd:// scheme");
  absl::string_view rest = url.substr(kScheme.size());
  const auto slash = rest.find('/');
  EtcdUrl parsed;
  if (slash != absl::string_view::npos) {
    parsed.prefix = std::string(absl::StripSuffix(rest.substr(slash), "/"));
    rest = rest.substr(0, slash);
  }
  if (rest.empty()) return bad("no endpoint");
  for (absl::string_view endpoint : absl::StrSplit(rest, ',')) {
    if (auto s = CheckEndpoint(endpoint); !s.ok()) return bad(s.message());
    parsed.endpoints.emplace_back(endpoint);
  }
  return parsed;
}

std::string PrefixRangeEnd(absl::string_view prefix) {
  std::string end(prefix);
  // The shortest key past every key starting with `prefix`: its last byte
  // below 0xff plus one, the bytes after it dropped.
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("no etcd endpoint");
  for (const auto& endpoint : options.endpoints) {
    if (auto s = CheckEndpoint(endpoint); !s.ok()) return s;
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options)));
}

EtcdClient::EtcdClient(EtcdOptions options) : options_(std::move(options)) {
  absl::MutexLock lock(&mu_);
  for (const auto& endpoint : options_.endpoints) members_.push_back(Connect(endpoint));
}

std::shared_ptr<const EtcdClient::Member> EtcdClient::Connect(const std::string& endpoint) const {
  grpc::ChannelArguments args;
  // Its own connection: not one shared with (and stuck like) an older channel.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(options_.backoff_initial.count()));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(options_.backoff_max.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(options_.call_timeout.count()));
  options_.security.Apply(args);
  auto member = std::make_shared<Member>();
  member->endpoint = endpoint;
  member->channel =
      options_.interceptors
          ? grpc::experimental::CreateCustomChannelWithInterceptors(
                endpoint, options_.security.credentials(), args, options_.interceptors())
          : grpc::CreateCustomChannel(endpoint, options_.security.credentials(), args);
  member->kv = etcdserverpb::KV::NewStub(member->channel);
  member->watch = etcdserverpb::Watch::NewStub(member->channel);
  member->lease = etcdserverpb::Lease::NewStub(member->channel);
  return member;
}

EtcdClient::InUse EtcdClient::Current() const {
  absl::MutexLock lock(&mu_);
  return {.index = current_, .member = members_[current_]};
}

void EtcdClient::Failed(size_t index) {
  auto fresh = Connect(options_.endpoints[index]);
  absl::MutexLock lock(&mu_);
  members_[index] = std::move(fresh);
  if (current_ != index || members_.size() == 1) return;
  current_ = (index + 1) % members_.size();
  spdlog::warn("etcd {} failed; moving on to {}", options_.endpoints[index],
               options_.endpoints[current_]);
}

template <typename Response, typename Call>
absl::StatusOr<Response> EtcdClient::Unary(const char* method, const Call& call) {
  std::vector<std::string> unavailable;
  for (size_t attempt = 0; attempt < options_.endpoints.size(); ++attempt) {
    const InUse in_use = Current();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + options_.call_timeout);
    Response response;
    const grpc::Status status = call(*in_use.member, &context, &response);
    if (status.ok()) return response;
    const std::string what = absl::StrCat("etcd ", method, " on ", in_use.member->endpoint, ": ",
                                          status.error_message());
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      Failed(in_use.index);
      unavailable.push_back(what);
      continue;
    }
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) Failed(in_use.index);
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), what);
  }
  return absl::UnavailableError(absl::StrJoin(unavailable, "; "));
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(
    const etcdserverpb::RangeRequest& request) {
  return Unary<etcdserverpb::RangeResponse>("Range", [&](const Member& m, auto* ctx, auto* out) {
    return m.kv->Range(ctx, request, out);
  });
}

absl::StatusOr<etcdserverpb::PutResponse> EtcdClient::Put(const etcdserverpb::PutRequest& request) {
  return Unary<etcdserverpb::PutResponse>(
      "Put", [&](const Member& m, auto* ctx, auto* out) { return m.kv->Put(ctx, request, out); });
}

absl::StatusOr<etcdserverpb::DeleteRangeResponse> EtcdClient::DeleteRange(
    const etcdserverpb::DeleteRangeRequest& request) {
  return Unary<etcdserverpb::DeleteRangeResponse>(
      "DeleteRange",
      [&](const Member& m, auto* ctx, auto* out) { return m.kv->DeleteRange(ctx, request, out); });
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(const etcdserverpb::TxnRequest& request) {
  return Unary<etcdserverpb::TxnResponse>(
      "Txn", [&](const Member& m, auto* ctx, auto* out) { return m.kv->Txn(ctx, request, out); });
}

absl::StatusOr<etcdserverpb::CompactionResponse> EtcdClient::Compact(
    const etcdserverpb::CompactionRequest& request) {
  return Unary<etcdserverpb::CompactionResponse>(
      "Compact",
      [&](const Member& m, auto* ctx, auto* out) { return m.kv->Compact(ctx, request, out); });
}

absl::StatusOr<etcdserverpb::LeaseGrantResponse> EtcdClient::LeaseGrant(
    const etcdserverpb::LeaseGrantRequest& request) {
  return Unary<etcdserverpb::LeaseGrantResponse>("LeaseGrant",
                                                 [&](const Member& m, auto* ctx, auto* out) {
                                                   return m.lease->LeaseGrant(ctx, request, out);
                                                 });
}

absl::StatusOr<etcdserverpb::LeaseRevokeResponse> EtcdClient::LeaseRevoke(
    const etcdserverpb::LeaseRevokeRequest& request) {
  return Unary<etcdserverpb::LeaseRevokeResponse>("LeaseRevoke",
                                                  [&](const Member& m, auto* ctx, auto* out) {
                                                    return m.lease->LeaseRevoke(ctx, request, out);
                                                  });
}

absl::StatusOr<etcdserverpb::LeaseTimeToLiveResponse> EtcdClient::LeaseTimeToLive(
    const etcdserverpb::LeaseTimeToLiveRequest& request) {
  return Unary<etcdserverpb::LeaseTimeToLiveResponse>(
      "LeaseTimeToLive", [&](const Member& m, auto* ctx, auto* out) {
        return m.lease->LeaseTimeToLive(ctx, request, out);
      });
}

absl::StatusOr<PrefixListing> ListPrefix(EtcdClient& client, const std::string& prefix,
                                         bool keys_only, int64_t page_size) {
  PrefixListing listing;
  etcdserverpb::RangeRequest request;
  request.set_key(prefix);
  request.set_range_end(PrefixRangeEnd(prefix));
  request.set_limit(page_size);
  request.set_keys_only(keys_only);
  while (true) {
    auto page = client.Range(request);
    if (!page.ok()) return page.status();
    // Every later page at the first one's revision: one snapshot.
    if (listing.revision == 0) {
      listing.revision = page->header().revision();
      request.set_revision(listing.revision);
    }
    for (auto& kv : *page->mutable_kvs()) listing.kvs.push_back(std::move(kv));
    if (!page->more() || page->kvs().empty()) return listing;
    // Pages come in key order: the next one starts just past this one's last key.
    request.set_key(listing.kvs.back().key() + '\0');
  }
}

absl::StatusOr<etcdserverpb::LeaseGrantResponse> GrantLease(EtcdClient& client,
                                                            int64_t ttl_seconds) {
  etcdserverpb::LeaseGrantRequest grant;
  grant.set_ttl(ttl_seconds);
  auto granted = client.LeaseGrant(grant);
  if (granted.ok() && !granted->error().empty()) {
    return absl::UnavailableError(absl::StrCat("etcd LeaseGrant: ", granted->error()));
  }
  return granted;
}

void SetPut(etcdserverpb::RequestOp& op, const std::string& key, const std::string& value,
            int64_t lease) {
  auto& put = *op.mutable_request_put();
  put.set_key(key);
  put.set_value(value);
  if (lease != 0) put.set_lease(lease);
}

etcdserverpb::Compare CreateRevisionIs(const std::string& key, int64_t revision) {
  etcdserverpb::Compare compare;
  compare.set_key(key);
  compare.set_target(etcdserverpb::Compare::CREATE);
  compare.set_result(etcdserverpb::Compare::EQUAL);
  compare.set_create_revision(revision);
  return compare;
}

void RevokeUnusedLease(EtcdClient& client, int64_t lease) {
  etcdserverpb::LeaseRevokeRequest revoke;
  revoke.set_id(lease);
  if (auto s = client.LeaseRevoke(revoke); !s.ok()) {
    spdlog::debug("revoking unused etcd lease {:x}: {}", lease, s.status().ToString());
  }
}

std::chrono::system_clock::time_point WallDeadline(const base::TimeSource& clock,
                                                   base::TimePoint deadline) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(deadline - clock.Now());
}

absl::Status DeadlineLeft(const base::TimeSource& clock, base::TimePoint deadline,
                          absl::string_view what) {
  if (clock.Now() < deadline) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(what, " ran out of time"));
}

namespace {

// After the key is gone: true once *holder_lease is gone too; false (after
// waiting up to `deadline`) while it lives.
absl::StatusOr<bool> HolderLeaseGone(EtcdClient& client, const std::string& key,
                                     int64_t* holder_lease, const base::TimeSource& clock,
                                     base::TimePoint deadline) {
  if (*holder_lease == 0) return true;
  etcdserverpb::LeaseTimeToLiveRequest ask;
  ask.set_id(*holder_lease);
  auto ttl = client.LeaseTimeToLive(ask);
  if (!ttl.ok()) return ttl.status();
  if (ttl->ttl() <= 0) {
    *holder_lease = 0;
    return true;
  }
  spdlog::warn(
      "{} deleted while its holder's etcd lease {:x} lives ({} s left): waiting for the lease, "
      "not the key",
      key, *holder_lease, ttl->ttl());
  // Asked again in the next slice: a revoke ends the wait early.
  const auto slice =
      std::min<base::Duration>(std::chrono::seconds(ttl->ttl()),
                               std::chrono::duration_cast<base::Duration>(deadline - clock.Now()));
  if (slice > base::Duration::zero()) std::this_thread::sleep_for(slice);
  return false;
}

}  // namespace

absl::StatusOr<bool> WaitHolderGone(EtcdClient& client, const std::string& key,
                                    int64_t* holder_lease, const base::TimeSource& clock,
                                    base::TimePoint deadline) {
  etcdserverpb::RangeRequest get;
  get.set_key(key);
  auto now = client.Range(get);
  if (!now.ok()) return now.status();
  if (now->kvs().empty()) return HolderLeaseGone(client, key, holder_lease, clock, deadline);
  *holder_lease = now->kvs(0).lease();  // the holder now (another may have taken over)
  const auto wall_deadline = WallDeadline(clock, deadline);
  const EtcdClient::InUse member = client.Current();
  if (!member.member->channel->WaitForConnected(wall_deadline)) {
    client.Failed(member.index);
    return false;  // the next call tries the next member
  }
  grpc::ClientContext context;
  context.AddMetadata(kRequireLeaderKey, kRequireLeaderValue);
  context.set_deadline(wall_deadline);
  auto stream = member.member->watch->Watch(&context);
  etcdserverpb::WatchRequest watch;
  auto* create = watch.mutable_create_request();
  create->set_key(key);
  create->set_start_revision(now->header().revision() + 1);
  bool deleted = false;
  if (stream->Write(watch)) {
    etcdserverpb::WatchResponse response;
    while (!deleted && stream->Read(&response)) {
      // A compacted start revision: read again next time.
      if (response.compact_revision() != 0 || response.canceled()) break;
      for (const auto& event : response.events()) {
        if (event.type() == mvccpb::Event::DELETE) deleted = true;
      }
    }
  }
  context.TryCancel();
  const grpc::Status status = stream->Finish();
  if (deleted) return HolderLeaseGone(client, key, holder_lease, clock, deadline);
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
      status.error_code() == grpc::StatusCode::CANCELLED || status.ok()) {
    return false;
  }
  client.Failed(member.index);
  return absl::UnavailableError(
      absl::StrCat("etcd Watch on ", member.member->endpoint, ": ", status.error_message()));
}

}  // namespace etcd
