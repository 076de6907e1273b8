// Leader election on a Lease of the real test cluster's apiserver, each
// replica on a fake clock of its own (so "a full duration" is stepped, not
// waited): who takes the Lease and when, what a renewal writes, a takeover
// racing another writer, a lost answer, a release, and Leases a hostile hand
// wrote (the apiserver checks their types and signs; what it lets through is
// tried here).
#include "controller/ha/kubernetes/lease_election.h"

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "kube/paths.h"
#include "tests/kube/test_cluster.h"
#include "tests/support/fake_time_source.h"
#include "tests/support/require_ok.h"
#include "tests/support/scripted_lease_store.h"

namespace controller::kubernetes {
namespace {

using base::Duration;
using base::TimePoint;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing_support::FakeTimeSource;
using testing_support::RequireOk;

constexpr char kLease[] = "share-controller";
constexpr Duration kTtl = seconds(6);

std::string LeasePath(const std::string& ns) {
  return kube::ResourcePath({.group = "coordination.k8s.io",
                             .version = "v1",
                             .namespace_name = ns,
                             .plural = "leases",
                             .name = kLease});
}

// One replica: its own client, clock (or `shared`, one all replicas step)
// and election. `gate`: its client's write gate (a test's hook right before
// each of its writes goes out).
struct Replica {
  Replica(const std::string& ns, const std::string& id, Duration ttl = kTtl,
          std::function<absl::Status()> gate = {}, FakeTimeSource* shared = nullptr)
      : clock(shared != nullptr ? *shared : own_clock),
        backend(MakeLeaseElectionBackend(
            RequireOk(kube::Client::Create(kube::testing::AdminConfig(),
                                           {.write_gate = std::move(gate)})),
            {.namespace_name = ns, .lease_name = kLease, .id = id, .ttl = ttl}, clock,
            [this](TimePoint until) { clock.AdvanceTo(until); })),
        election(*backend, clock, LeaderElectionOptions{.id = id, .ttl = ttl},
                 LeaderElection::Hooks{
                     .elected =
                         [this](int64_t) {
                           ++elected;
                           elected_at = clock.Now();
                         },
                     .deposed = [this](const std::string& why) { deposed.push_back(why); }}) {}
  ~Replica() { election.Stop(LeaderElection::StopMode::kLetExpire).IgnoreError(); }

  // Steps the election until its clock has moved `d` on.
  void Run(Duration d) { testing_support::StepKeeperUntil(election, clock, clock.Now() + d); }
  bool leading() { return election.LeadingAt(clock.Now()); }

  FakeTimeSource own_clock;
  FakeTimeSource& clock;
  std::unique_ptr<ElectionBackend> backend;
  int elected = 0;
  TimePoint elected_at{};
  std::vector<std::string> deposed;
  LeaderElection election;
};

struct Fixture {
  std::unique_ptr<kube::Client> admin =
      RequireOk(kube::Client::Create(kube::testing::AdminConfig()));
  kube::testing::TestNamespace ns{*admin, "lease-election"};
  json Lease() { return RequireOk(admin->Get(LeasePath(ns.name()))); }
  json Spec() { return Lease()["spec"]; }
  // A Lease written by hand, as an operator or a hostile writer would.
  void Write(const json& spec) {
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", kLease}}}};
    if (!spec.is_null()) lease["spec"] = spec;
    auto current = admin->Get(LeasePath(ns.name()));
    if (current.ok()) {
      lease["metadata"]["resourceVersion"] = (*current)["metadata"]["resourceVersion"];
      RequireOk(admin->Replace(LeasePath(ns.name()), lease));
    } else {
      RequireOk(admin->Create(kube::ResourcePath({.group = "coordination.k8s.io",
                                                  .version = "v1",
                                                  .namespace_name = ns.name(),
                                                  .plural = "leases"}),
                              lease));
    }
  }
};

}  // namespace

TEST_CASE("Lease election: no Lease yet is made only after a full TTL, then renewed") {
  Fixture f;
  Replica a(f.ns.name(), "ctl-a");
  a.Run(kTtl - milliseconds(500));
  CHECK(a.elected == 0);
  CHECK(absl::IsNotFound(f.admin->Get(LeasePath(f.ns.name())).status()));
  a.Run(seconds(1));
  REQUIRE(a.elected == 1);
  CHECK(a.leading());
  json spec = f.Spec();
  CHECK(spec["holderIdentity"] == "ctl-a");
  CHECK(spec["leaseDurationSeconds"] == 6);
  CHECK(spec["leaseTransitions"] == 0);
  const std::string acquired = spec["acquireTime"];
  const std::string version = f.Lease()["metadata"]["resourceVersion"];
  a.Run(seconds(3));  // a renewal every TTL/3
  CHECK(a.leading());
  CHECK(f.Lease()["metadata"]["resourceVersion"] != version);
  CHECK(f.Spec()["acquireTime"] == acquired);
  CHECK(a.deposed.empty());
}

TEST_CASE("Lease election: a follower takes over only after the version stood a full duration") {
  Fixture f;
  Replica a(f.ns.name(), "ctl-a");
  a.Run(kTtl + seconds(1));
  REQUIRE(a.elected == 1);
  Replica b(f.ns.name(), "ctl-b");
  // While a renews, b's clock may run far past a TTL: the version moves.
  for (int i = 0; i < 5; ++i) {
    b.Run(seconds(2));
    a.Run(seconds(2));
  }
  CHECK(b.elected == 0);
  CHECK(f.Spec()["holderIdentity"] == "ctl-a");
  // a stops renewing (dead, frozen): b takes it one duration after it last
  // saw a new version, not before.
  b.Run(kTtl - seconds(2));
  CHECK(b.elected == 0);
  b.Run(seconds(3));
  REQUIRE(b.elected == 1);
  json spec = f.Spec();
  CHECK(spec["holderIdentity"] == "ctl-b");
  CHECK(spec["leaseTransitions"] == 1);
  // a's next renewal finds the Lease someone else's: deposed, for good.
  a.Run(seconds(3));
  REQUIRE(a.deposed.size() == 1);
  CHECK_MESSAGE(a.deposed[0].find("ctl-b") != std::string::npos, a.deposed[0]);
  CHECK_FALSE(a.leading());
  CHECK(f.Spec()["holderIdentity"] == "ctl-b");
}

TEST_CASE(
    "Lease election: on one clock, the old leader's validity ends before the new one is elected") {
  Fixture f;
  FakeTimeSource clock;
  Replica a(f.ns.name(), "ctl-a", kTtl, {}, &clock);
  a.Run(kTtl + seconds(1));
  REQUIRE(a.elected == 1);
  a.Run(seconds(2) + milliseconds(300));  // one renewal more, then a stops
  Replica b(f.ns.name(), "ctl-b", kTtl, {}, &clock);
  b.Run(kTtl + seconds(2));
  REQUIRE(b.elected == 1);
  CHECK(a.deposed.empty());  // never stepped since: it knows nothing
  CHECK_FALSE(a.election.LeadingAt(b.elected_at));
  const auto until = a.election.valid_until();
  REQUIRE(until.has_value());
  // No overlap at all, with more than the fence margin to spare.
  CHECK(b.elected_at - *until >= milliseconds(1200));
}

TEST_CASE("Lease election: a takeover raced by another writer loses and follows") {
  Fixture f;
  f.Write({{"holderIdentity", "ctl-x"}, {"leaseDurationSeconds", 6}});
  bool raced = false;
  // Right before b's take goes out, x renews: b's PUT carries a stale
  // version. (A renewal changes renewTime: the apiserver keeps the version
  // of an update that changes nothing.)
  Replica b(f.ns.name(), "ctl-b", kTtl, [&] {
    if (!raced) {
      raced = true;
      f.Write({{"holderIdentity", "ctl-x"},
               {"leaseDurationSeconds", 6},
               {"renewTime", "2026-01-01T00:00:01.000000Z"}});
    }
    return absl::OkStatus();
  });
  b.Run(kTtl + seconds(1));
  CHECK(raced);
  CHECK(b.elected == 0);
  CHECK(f.Spec()["holderIdentity"] == "ctl-x");
  // Not renewed again: b takes it a full duration after the racing write.
  b.Run(kTtl);
  CHECK(b.elected == 1);
  CHECK(f.Spec()["holderIdentity"] == "ctl-b");
}

TEST_CASE("Lease election: the Lease moved on while still naming our term: renewed, rewritten") {
  Fixture f;
  Replica a(f.ns.name(), "ctl-a");
  a.Run(kTtl + seconds(1));
  REQUIRE(a.elected == 1);
  json spec = f.Spec();
  SUBCASE("what a renewal that landed while its answer was lost leaves") {
    spec["renewTime"] = "2030-01-01T00:00:00.000000Z";
  }
  SUBCASE("a duration edited by hand") { spec["leaseDurationSeconds"] = 1; }
  f.Write(spec);
  a.Run(seconds(3));
  CHECK(a.deposed.empty());
  CHECK(a.leading());
  const json renewed = f.Spec();
  CHECK(renewed["holderIdentity"] == "ctl-a");
  CHECK(renewed["renewTime"] != "2030-01-01T00:00:00.000000Z");
  CHECK(renewed["leaseDurationSeconds"] == 6);
}

TEST_CASE("Lease election: released, the follower takes over in a second, not a TTL") {
  Fixture f;
  constexpr Duration kLong = seconds(10);
  Replica a(f.ns.name(), "ctl-a", kLong);
  a.Run(kLong + seconds(1));
  REQUIRE(a.elected == 1);
  Replica b(f.ns.name(), "ctl-b", kLong);
  b.Run(seconds(1));
  CHECK(b.elected == 0);
  const absl::Status resigned = a.election.Stop(LeaderElection::StopMode::kResign);
  REQUIRE_MESSAGE(resigned.ok(), resigned.ToString());
  json spec = f.Spec();
  CHECK_FALSE(spec.contains("holderIdentity"));
  CHECK(spec["leaseDurationSeconds"] == 1);
  b.Run(seconds(3));
  CHECK(b.elected == 1);
  CHECK(f.Spec()["holderIdentity"] == "ctl-b");
}

TEST_CASE("Lease election: hostile Leases cannot hurry or stall a takeover") {
  Fixture f;
  SUBCASE("a holder's one-second duration still waits the follower's own TTL") {
    f.Write({{"holderIdentity", "ctl-x"}, {"leaseDurationSeconds", 1}});
    Replica b(f.ns.name(), "ctl-b");
    b.Run(kTtl - seconds(1));
    CHECK(b.elected == 0);
    b.Run(seconds(2));
    CHECK(b.elected == 1);
  }
  SUBCASE("a huge duration waits 5 minutes at most") {
    f.Write({{"holderIdentity", "ctl-x"}, {"leaseDurationSeconds", 2'000'000'000}});
    Replica b(f.ns.name(), "ctl-b");
    b.Run(seconds(299));
    CHECK(b.elected == 0);
    b.Run(seconds(2));
    CHECK(b.elected == 1);
  }
  SUBCASE("leaseTransitions at int32's maximum wraps, not an invalid take") {
    f.Write({{"holderIdentity", "ctl-x"},
             {"leaseDurationSeconds", 1},
             {"leaseTransitions", 2147483647}});
    Replica b(f.ns.name(), "ctl-b");
    b.Run(kTtl + seconds(1));
    REQUIRE(b.elected == 1);
    CHECK(f.Spec()["leaseTransitions"] == 0);
  }
  SUBCASE("a Lease without a spec counts as released") {
    f.Write(json());
    Replica b(f.ns.name(), "ctl-b");
    b.Run(seconds(2));
    CHECK(b.elected == 1);
    CHECK(f.Spec()["holderIdentity"] == "ctl-b");
  }
  SUBCASE("deleted under a holder: the follower waits the holder's duration before making it") {
    f.Write({{"holderIdentity", "ctl-x"}, {"leaseDurationSeconds", 20}});
    Replica b(f.ns.name(), "ctl-b");
    b.Run(seconds(1));
    RequireOk(f.admin->Delete(LeasePath(f.ns.name())));
    b.Run(seconds(18));
    CHECK(b.elected == 0);
    CHECK(absl::IsNotFound(f.admin->Get(LeasePath(f.ns.name())).status()));
    b.Run(seconds(3));
    CHECK(b.elected == 1);
  }
}

}  // namespace controller::kubernetes
