// share-controller's HA flags as ResolveHaReplica reads them. Replicas as
// processes on a real etcd are tests/integration/controller_ha_test.cc.
#include "controller/ha/ha_replica.h"

#include <doctest/doctest.h>

#include <string>

namespace controller {
namespace {

absl::StatusOr<HaReplicaOptions> Resolve(const HaFlags& flags) {
  return ResolveHaReplica(flags, etcd::EtcdUrl{.endpoints = {"127.0.0.1:2379"}, .prefix = "/p"},
                          base::ClientSecurity{}, base::TlsFlags{}, "/work");
}

}  // namespace

TEST_CASE(
    "HA flags: the lease TTLs are whole seconds from 2s to 5m, the drift margin within the TTL") {
  HaFlags flags{.leader_ttl = "2s", .pod_lease_ttl = "300s", .pod_lease_drift_margin = "300s"};
  auto options = Resolve(flags);
  REQUIRE(options.ok());
  CHECK(options->leader_ttl == std::chrono::seconds(2));
  REQUIRE(options->pod_leases.has_value());
  CHECK(options->pod_leases->ttl == std::chrono::minutes(5));
  CHECK(options->pod_leases->drift_margin == std::chrono::minutes(5));

  struct Case {
    void (*mutate)(HaFlags&);
    const char* refused;
  };
  const Case cases[] = {
      {[](HaFlags& f) { f.leader_ttl = "1s"; },
       "--leader-ttl must be whole seconds (etcd counts its leases in seconds) between 2s and "
       "5m0s"},
      {[](HaFlags& f) { f.leader_ttl = "2500ms"; },
       "--leader-ttl must be whole seconds (etcd counts its leases in seconds) between 2s and "
       "5m0s"},
      {[](HaFlags& f) { f.leader_ttl = "soon"; },
       "--leader-ttl: invalid duration 'soon' (examples: 250ms, 3s, 1.5s, 2m)"},
      {[](HaFlags& f) { f.pod_lease_ttl = "301s"; },
       "--pod-lease-ttl must be whole seconds (etcd counts its leases in seconds) between 2s and "
       "5m0s"},
      {[](HaFlags& f) { f.pod_lease_drift_margin = "301s"; },
       "--pod-lease-drift-margin: must not exceed --pod-lease-ttl"},
      {[](HaFlags& f) { f.pod_lease_drift_margin = "-1s"; },
       "--pod-lease-drift-margin: invalid duration '-1s' (examples: 250ms, 3s, 1.5s, 2m)"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.refused);
    HaFlags bad = flags;
    c.mutate(bad);
    const auto refused = Resolve(bad);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(refused.status().message() == c.refused);
  }
}

}  // namespace controller
