// The etcd client's lease calls and streams on a real cluster, as leader
// election and share-manager leases use them.
#include <doctest/doctest.h>

#include "controller/etcd_client.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/require_ok.h"

namespace controller {
namespace {

using testing_support::RequireOk;

}  // namespace

TEST_CASE("etcd leases: kept alive on a stream, listed with their keys, revoked with them") {
  testing_support::EtcdCluster cluster;
  auto client = RequireOk(EtcdClient::Create({.endpoints = cluster.endpoints()}));
  etcdserverpb::LeaseGrantRequest grant;
  grant.set_ttl(30);
  const int64_t lease = RequireOk(client->LeaseGrant(grant)).id();
  REQUIRE(lease != 0);
  etcdserverpb::PutRequest put;
  put.set_key("/test-lease/holder");
  put.set_value("me");
  put.set_lease(lease);
  REQUIRE(client->Put(put).ok());

  {
    const auto in_use = client->Current();
    const auto& member = *in_use.member;
    grpc::ClientContext context;
    context.AddMetadata(kRequireLeaderKey, kRequireLeaderValue);
    auto stream = member.lease->LeaseKeepAlive(&context);
    etcdserverpb::LeaseKeepAliveRequest keep;
    keep.set_id(lease);
    REQUIRE(stream->Write(keep));
    etcdserverpb::LeaseKeepAliveResponse kept;
    REQUIRE(stream->Read(&kept));
    CHECK(kept.id() == lease);
    CHECK(kept.ttl() == 30);
    context.TryCancel();
    stream->Finish();
  }

  etcdserverpb::LeaseTimeToLiveRequest ttl;
  ttl.set_id(lease);
  ttl.set_keys(true);
  auto alive = RequireOk(client->LeaseTimeToLive(ttl));
  CHECK(alive.ttl() > 0);
  CHECK(alive.grantedttl() == 30);
  REQUIRE(alive.keys_size() == 1);
  CHECK(alive.keys(0) == "/test-lease/holder");

  etcdserverpb::LeaseRevokeRequest revoke;
  revoke.set_id(lease);
  REQUIRE(client->LeaseRevoke(revoke).ok());
  etcdserverpb::RangeRequest get;
  get.set_key("/test-lease/holder");
  CHECK(RequireOk(client->Range(get)).kvs().empty());
  CHECK(RequireOk(client->LeaseTimeToLive(ttl)).ttl() == -1);
}

}  // namespace controller
