// The etcd client's calls on a real cluster: listings page by page, and
// leases as leader election and share-manager leases use them.
#include <doctest/doctest.h>

#include "etcd/client.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/require_ok.h"

namespace etcd {
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

TEST_CASE("etcd: a prefix listed a page at a time holds every key under it, in order, once") {
  testing_support::EtcdCluster cluster;
  auto client = RequireOk(EtcdClient::Create({.endpoints = cluster.endpoints()}));
  // Around the prefix: keys that sort just before and just after it.
  for (const std::string key :
       {"/list.", "/list/a", "/list/b", "/list/c", "/list/d", "/list/e", "/list0", "/lis"}) {
    etcdserverpb::PutRequest put;
    put.set_key(key);
    put.set_value("v" + key);
    REQUIRE(client->Put(put).ok());
  }
  for (const int64_t page_size : {2, 1, 5, 500}) {
    CAPTURE(page_size);
    const auto listing = RequireOk(ListPrefix(*client, "/list/", /*keys_only=*/false, page_size));
    std::vector<std::string> keys;
    for (const auto& kv : listing.kvs) {
      keys.push_back(kv.key());
      CHECK(kv.value() == "v" + kv.key());
    }
    CHECK(keys == std::vector<std::string>{"/list/a", "/list/b", "/list/c", "/list/d", "/list/e"});
    etcdserverpb::RangeRequest any;
    any.set_key("any");
    CHECK(listing.revision == RequireOk(client->Range(any)).header().revision());
  }
}

}  // namespace etcd
