// LeaseKeepAliveStream on a real cluster: one stream across renewals, an
// expired lease's answer, and a frozen member left for the next one.
#include "etcd/lease_keep_alive.h"

#include <doctest/doctest.h>
#include <signal.h>

#include "base/proc.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/require_ok.h"
#include "tests/support/wait_for.h"

namespace etcd {
namespace {

using std::chrono::milliseconds;
using testing_support::RequireOk;

int64_t Grant(EtcdClient& client, int64_t ttl) {
  etcdserverpb::LeaseGrantRequest grant;
  grant.set_ttl(ttl);
  return RequireOk(client.LeaseGrant(grant)).id();
}

LeaseKeepAliveStream::Deadline In(milliseconds d) { return std::chrono::system_clock::now() + d; }

}  // namespace

TEST_CASE("a lease kept alive on one stream: each renewal answers its TTL, a revoked one TTL 0") {
  testing_support::EtcdCluster cluster;
  auto client = RequireOk(EtcdClient::Create({.endpoints = cluster.endpoints()}));
  const int64_t lease = Grant(*client, 30);
  LeaseKeepAliveStream stream(*client);
  for (int i = 0; i < 3; ++i) {
    const auto kept = RequireOk(stream.KeepAlive(lease, In(milliseconds(5000))));
    CHECK(kept.id() == lease);
    CHECK(kept.ttl() == 30);
  }
  etcdserverpb::LeaseRevokeRequest revoke;
  revoke.set_id(lease);
  REQUIRE(client->LeaseRevoke(revoke).ok());
  CHECK(RequireOk(stream.KeepAlive(lease, In(milliseconds(5000)))).ttl() <= 0);
  CHECK(client->Current().index == 0);  // never moved on: nothing failed
}

// State T in /proc/<pid>/stat: the process is stopped.
bool IsStopped(pid_t pid) {
  const auto stat = base::ReadProcStat(pid);
  return stat && stat->state == 'T';
}

TEST_CASE(
    "the member in use frozen: the renewal fails by its deadline, the next one is answered by the "
    "next member") {
  testing_support::EtcdCluster cluster;
  auto client = RequireOk(EtcdClient::Create({.endpoints = cluster.endpoints()}));
  const int64_t lease = Grant(*client, 30);
  LeaseKeepAliveStream stream(*client);
  REQUIRE(stream.KeepAlive(lease, In(milliseconds(5000))).ok());
  REQUIRE(client->Current().index == 0);
  testing_support::KillPid(cluster.pid(0), SIGSTOP);
  // SIGSTOP takes effect asynchronously: under ASan's load the member once
  // still answered the next keep-alive. Wait until it shows stopped (T).
  REQUIRE(testing_support::WaitFor([&] { return IsStopped(cluster.pid(0)); }, milliseconds(5000)));
  const auto frozen = stream.KeepAlive(lease, In(milliseconds(1000)));
  CHECK(frozen.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(client->Current().index == 1);
  // The rest may need a new leader first (the frozen one may have led).
  bool renewed = false;
  for (int attempt = 0; attempt < 20 && !renewed; ++attempt) {
    auto kept = stream.KeepAlive(lease, In(milliseconds(2000)));
    renewed = kept.ok() && kept->ttl() == 30;
  }
  CHECK(renewed);
  testing_support::KillPid(cluster.pid(0), SIGCONT);
}

}  // namespace etcd
