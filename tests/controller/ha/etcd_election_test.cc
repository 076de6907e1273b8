// Leader election on a real 3-member etcd, in one process: one leader at a
// time, a follower taking over, and a leader that stopped renewing (frozen)
// fenced twice: by etcd (its guarded writes are refused) and by its own
// clock (its pod actions are refused). share-controller replicas as
// processes: tests/integration/controller_ha_test.cc.
#include "controller/ha/etcd_election.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>

#include "absl/synchronization/mutex.h"
#include "controller/ha/leader_gate.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/etcd_keys.h"
#include "tests/support/fake_time_source.h"
#include "tests/support/require_ok.h"
#include "tests/support/wait_for.h"

namespace controller {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing_support::EtcdGet;
using testing_support::EtcdRevision;
using testing_support::RequireOk;
using testing_support::WaitFor;

constexpr char kPrefix[] = "/ha";

std::shared_ptr<etcd::EtcdClient> Client(const testing_support::EtcdCluster& cluster,
                                         base::Duration call_timeout = seconds(5)) {
  return RequireOk(
      etcd::EtcdClient::Create({.endpoints = cluster.endpoints(), .call_timeout = call_timeout}));
}

ShareRecord Record(const std::string& name) {
  ShareRecord record;
  record.set_name(name);
  record.mutable_spec()->set_volume(name);
  record.mutable_spec()->set_serve(true);
  return record;
}

// One replica: its store, guarded once elected, and its election on `clock`.
struct Replica {
  Replica(const testing_support::EtcdCluster& cluster, const std::string& id,
          const base::TimeSource& clock, base::Duration ttl)
      : store(RequireOk(EtcdStore::Open(Client(cluster), kPrefix))),
        backend(MakeEtcdElectionBackend(Client(cluster, etcd::LeaseCallTimeout(ttl)), kPrefix, id,
                                        clock)),
        election(*backend, clock, LeaderElectionOptions{.id = id, .ttl = ttl},
                 LeaderElection::Hooks{.elected =
                                           [this](int64_t token) {
                                             store->SetWriteGuard(LeaderWriteGuard(kPrefix, token));
                                             absl::MutexLock lock(&mu);
                                             elected = true;
                                           },
                                       .deposed =
                                           [this](const std::string& why) {
                                             absl::MutexLock lock(&mu);
                                             deposed = why;
                                           }}) {}

  bool Elected() {
    absl::MutexLock lock(&mu);
    return elected;
  }
  std::string Deposed() {
    absl::MutexLock lock(&mu);
    return deposed;
  }

  std::unique_ptr<EtcdStore> store;
  std::unique_ptr<ElectionBackend> backend;
  absl::Mutex mu;
  bool elected ABSL_GUARDED_BY(mu) = false;
  std::string deposed ABSL_GUARDED_BY(mu);
  LeaderElection election;  // last: stopped before the rest goes
};

// Counts the pod actions that get through.
class CountingRuntime final : public PodRuntime {
 public:
  absl::StatusOr<Pod> Create(const sharemanager::controller::v1::ShareSpec& spec,
                             uint64_t epoch) override {
    ++creates;
    return Pod{.name = PodName(spec.volume(), epoch), .volume = spec.volume(), .epoch = epoch};
  }
  absl::Status Delete(const std::string&) override {
    ++deletes;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<Pod>> List(const std::string&) override { return std::vector<Pod>{}; }
  void Watch(Listener) override {}
  std::atomic<int> creates{0}, deletes{0};
};

}  // namespace

TEST_CASE(
    "etcd election: one leader, whose key's create_revision is its token, a follower takes over "
    "when it resigns, and the old leader's guarded writes are refused") {
  testing_support::EtcdCluster cluster;
  auto look = Client(cluster);
  base::SteadyTimeSource clock;
  Replica a(cluster, "ctl-a", clock, seconds(2));
  Replica b(cluster, "ctl-b", clock, seconds(2));
  a.election.Start();
  REQUIRE(WaitFor([&] { return a.Elected(); }, milliseconds(10'000)));
  b.election.Start();
  const auto leader = RequireOk(EtcdGet(*look, "/ha/leader"));
  CHECK(leader.value() == "ctl-a");
  CHECK(leader.lease() != 0);
  CHECK(a.election.token() == leader.create_revision());
  // The follower watches; it never leads while ctl-a renews (3 TTLs).
  CHECK(testing_support::HoldsFor([&] { return !b.Elected(); }, milliseconds(6000)));
  CHECK(a.election.LeadingAt(clock.Now()));

  const auto created = RequireOk(a.store->Create(Record("vol")));
  REQUIRE(a.election.Stop(LeaderElection::StopMode::kResign).ok());
  const auto resigned = std::chrono::steady_clock::now();
  REQUIRE(WaitFor([&] { return b.Elected(); }, milliseconds(10'000)));
  MESSAGE("ctl-b led " << std::chrono::duration_cast<milliseconds>(
                              std::chrono::steady_clock::now() - resigned)
                              .count()
                       << " ms after ctl-a resigned");
  REQUIRE(b.election.token().has_value());
  CHECK(*b.election.token() > *a.election.token());
  CHECK(RequireOk(EtcdGet(*look, "/ha/leader")).value() == "ctl-b");

  // ctl-a's store still carries ctl-a's guard: refused as not leader, not a conflict.
  ShareRecord change = created;
  change.mutable_status()->set_reason("written by ctl-a after it resigned");
  const auto refused = a.store->Update(change);
  REQUIRE_FALSE(refused.ok());
  CHECK(IsNotLeader(refused.status()));
  CHECK(refused.status().message().find("not leader") != std::string::npos);
  CHECK(RequireOk(b.store->Get("vol")).resource_version() == created.resource_version());
  change.mutable_status()->set_reason("written by ctl-b");
  CHECK(b.store->Update(change).ok());
}

// A frozen leader is modelled by its keeper never stepping and its clock
// standing still; "waking up" moves its clock by the time that passed.
TEST_CASE(
    "etcd election: a leader frozen past its TTL is replaced, and woken its writes are refused by "
    "etcd, its pod actions by its own clock, nothing it does reaches the store, and it is "
    "deposed") {
  testing_support::EtcdCluster cluster;
  auto look = Client(cluster);
  testing_support::FakeTimeSource frozen_clock;
  base::SteadyTimeSource clock;
  Replica a(cluster, "ctl-a", frozen_clock, seconds(2));
  const auto frozen_at = std::chrono::steady_clock::now();
  a.election.Step();  // elected; then never stepped again: frozen
  REQUIRE(a.Elected());
  const auto created = RequireOk(a.store->Create(Record("vol")));
  CountingRuntime pods;
  LeaderGatedRuntime a_runtime(
      pods, [&] { return a.election.LeadingAt(frozen_clock.Now()); },
      [&](const std::string& why) {
        absl::MutexLock lock(&a.mu);
        a.deposed = why;
      });
  sharemanager::controller::v1::ShareSpec spec;
  spec.set_volume("vol");
  REQUIRE(a_runtime.Create(spec, 1).ok());  // leading: through

  Replica b(cluster, "ctl-b", clock, seconds(2));
  b.election.Start();
  REQUIRE(WaitFor([&] { return b.Elected(); }, milliseconds(15'000)));
  const auto took_over = std::chrono::steady_clock::now() - frozen_at;
  MESSAGE("ctl-b led " << std::chrono::duration_cast<milliseconds>(took_over).count()
                       << " ms after ctl-a's last renewal (TTL 2 s)");
  // etcd expired ctl-a's lease: no earlier than its TTL after the grant.
  CHECK(took_over >= seconds(2));

  // Still frozen (its clock has not moved: it believes it leads), ctl-a
  // writes: etcd's guard alone refuses it.
  CHECK(a.election.LeadingAt(frozen_clock.Now()));
  const int64_t before = EtcdRevision(*look);
  ShareRecord change = created;
  change.mutable_status()->set_reason("written by the frozen ctl-a");
  const auto refused = a.store->Update(change);
  REQUIRE_FALSE(refused.ok());
  CHECK(IsNotLeader(refused.status()));
  CHECK(a.store->Delete("vol").code() == absl::StatusCode::kFailedPrecondition);
  CHECK(a.store->Create(Record("other")).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(EtcdRevision(*look) == before);  // nothing reached etcd
  CHECK(RequireOk(b.store->Get("vol")).resource_version() == created.resource_version());

  // It wakes: its clock moves on by what passed. Past valid_until, it no
  // longer leads before its keeper even steps, so no pod action goes out...
  frozen_clock.Advance(
      std::chrono::duration_cast<base::Duration>(std::chrono::steady_clock::now() - frozen_at));
  CHECK_FALSE(a.election.LeadingAt(frozen_clock.Now()));
  CHECK(IsNotLeader(a_runtime.Create(spec, 2).status()));
  CHECK(IsNotLeader(a_runtime.Delete(PodName("vol", 1))));
  CHECK(pods.creates == 1);
  CHECK(pods.deletes == 0);
  CHECK(a.Deposed().find("refused to delete pod") != std::string::npos);
  // ... and its first step deposes it for good.
  {
    absl::MutexLock lock(&a.mu);
    a.deposed.clear();
  }
  CHECK(a.election.Step() == base::TimePoint::max());
  CHECK(a.Deposed().find("no renewal confirmed") != std::string::npos);
  CHECK(b.election.LeadingAt(clock.Now()));
}

}  // namespace controller
