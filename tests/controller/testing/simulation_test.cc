// A seeded simulation: thousands of random steps (passes, pod deaths, frozen
// share-managers, read-only events, repairs, time passing, wall-clock steps
// both ways, controller restarts over the same store and cluster, failing
// and lingering pod deletions, stale or foreign answers, store conflicts and
// errors, pod-call and RPC faults) with the invariants checked after every step, then
// convergence once the faults stop. A failing seed is printed; replay it with
//   SHARE_SIM_SEED=<seed> ./build/tests/controller_unit_tests -tc='*seeded simulation*'
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <random>

#include "controller/core/conditions.h"
#include "controller/core/controller.h"
#include "tests/controller/sim_fixture.h"

namespace controller {
namespace {

constexpr int kShares = 4;
constexpr int kSteps = 3000;

std::string Volume(int i) { return "vol-" + std::to_string(i); }

// A competing writer: bumps the record so the reconciler's next write conflicts.
void Conflict(Sim& sim, const std::string& name) {
  auto record = sim.Get(name);
  record.mutable_spec()->add_daemon_flags("--log-level=info");
  record.mutable_spec()->clear_daemon_flags();
  (void)sim.memory.Update(record);
}

void RunSeed(uint64_t seed) {
  INFO("replay: SHARE_SIM_SEED=", seed,
       " ./build/tests/controller_unit_tests -tc='*seeded simulation*'");
  ReconcilerOptions options;
  options.remount_delay_ms = 300;
  options.unhealthy_grace_ms = 1000;
  options.start_timeout_ms = 5000;
  options.repair_budget_ms = 20'000;  // some repairs outlive it
  Sim sim(options);
  for (int i = 0; i < kShares; ++i) sim.AddShare(Volume(i));
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  std::map<std::string, uint64_t> read_only_events;  // edges we caused, per share

  sim.store.faults().Randomize(seed ^ 1, 0.05);
  sim.runtime.faults().Randomize(seed ^ 2, 0.05);
  sim.cluster.rpc_faults().Randomize(seed ^ 3, 0.05);

  for (int step = 0; step < kSteps; ++step) {
    CAPTURE(step);
    const std::string name = Volume(pick(kShares));
    const auto pods = sim.cluster.Pods(name);
    const int action = pick(110);
    if (action < 60) {
      const uint64_t faults_before = sim.store.faults().fired() + sim.runtime.faults().fired();
      const uint64_t rpc_faults_before = sim.cluster.rpc_faults().fired();
      const auto before = sim.cluster.Pods(name);
      // A current pod that will answer with a repair within the budget.
      // (Unless it answers as another server, was condemned before its repair,
      // or its deletion is under way: it goes whatever it answers.)
      std::string repairing;
      const auto status_before = sim.Get(name).status();
      for (const auto& p : before) {
        if (p.pod.epoch == status_before.epoch() && p.repair && !p.frozen &&
            p.pod.phase == PodPhase::kRunning && p.reported_epoch == 0 &&
            p.reported_volume.empty() && status_before.phase() != pb::ERROR && !p.gone_at_ms &&
            sim.clock.MonotonicMs() - p.repair_started_ms <= options.repair_budget_ms) {
          repairing = p.pod.name;
        }
      }
      sim.Pass(name);
      // The repair contract: a pod that answered "repairing" within the budget stays.
      if (!repairing.empty() && sim.cluster.rpc_faults().fired() == rpc_faults_before) {
        bool alive = false;
        for (const auto& p : sim.cluster.Pods(name)) alive = alive || p.pod.name == repairing;
        CHECK_MESSAGE(alive, repairing, " was deleted while repairing within its budget");
      }
      // Status never stale by more than one pass: a pass whose store and
      // runtime calls all worked has recorded a dead current pod as not RUNNING.
      if (sim.store.faults().fired() + sim.runtime.faults().fired() == faults_before) {
        const auto st = sim.Get(name).status();
        bool current_dead = false;
        for (const auto& p : before) {
          if (p.pod.epoch == st.epoch() &&
              (p.pod.phase == PodPhase::kFailed || p.pod.phase == PodPhase::kSucceeded)) {
            current_dead = true;
          }
        }
        if (current_dead) CHECK(st.phase() != pb::RUNNING);
      }
    } else if (action < 67 && !pods.empty()) {
      sim.cluster.Kill(pods[static_cast<size_t>(pick(static_cast<int>(pods.size())))].pod.name,
                       pick(2) == 0 ? 3 : 0);
    } else if (action < 72 && !pods.empty()) {
      sim.cluster.Freeze(pods[0].pod.name, pick(2) == 0);
    } else if (action < 77 && !pods.empty()) {
      if (!pods[0].read_only) {
        sim.cluster.SetReadOnly(pods[0].pod.name, true);
        read_only_events[name]++;
      }
    } else if (action < 80 && !pods.empty()) {
      if (pods[0].repair) {
        sim.cluster.EndRepair(pods[0].pod.name, pick(2) == 0);
      } else {
        sim.cluster.StartRepair(pods[0].pod.name, "e2fsck -p", /*startup_check=*/pick(2) == 0);
      }
    } else if (action < 85) {
      Conflict(sim, name);
    } else if (action < 100) {
      sim.clock.Advance(pick(1500));
    } else if (action < 102) {
      sim.clock.StepWall(pick(2) == 0 ? -3'600'000 : 3'600'000);
    } else if (action < 104) {
      sim.Restart();  // in-memory state gone; store and cluster stay
    } else if (action < 106) {
      sim.cluster.FailDeletes(pick(4));
    } else if (action < 108) {
      sim.cluster.SetDeleteLag(pick(2) == 0 ? 0 : pick(3000));
    } else if (!pods.empty()) {
      // Another server answers at the pod's endpoint: an old epoch's or
      // another volume's; or the pod's own again.
      const auto& p = pods[static_cast<size_t>(pick(static_cast<int>(pods.size())))];
      switch (pick(3)) {
        case 0:
          sim.cluster.SetReportedEpoch(p.pod.name, p.pod.epoch > 1 ? p.pod.epoch - 1 : 99);
          break;
        case 1:
          sim.cluster.SetReportedVolume(p.pod.name, Volume((pick(kShares) + 1) % kShares));
          break;
        default:
          sim.cluster.SetReportedEpoch(p.pod.name, 0);
          sim.cluster.SetReportedVolume(p.pod.name, "");
      }
    }
    // Invariants, every step.
    for (int i = 0; i < kShares; ++i) {
      const std::string v = Volume(i);
      REQUIRE(sim.cluster.LivePods(v) <= 1);  // never two active servers
      const auto st = sim.Get(v).status();
      // Requests are bounded by the events that caused them (each pod's first
      // read-only observation can add one; a new pod is a new event source).
      CHECK(st.remount_requested_generation() <= read_only_events[v]);
      CHECK(st.remount_acknowledged_generation() <= st.remount_requested_generation());
    }
  }

  // Every kind of fault was really injected.
  CHECK(sim.store.faults().fired() > 0);
  CHECK(sim.runtime.faults().fired() > 0);
  CHECK(sim.cluster.rpc_faults().fired() > 0);
  CHECK(sim.cluster.delete_calls() > 0);

  // Faults stop: every share converges to exactly one running pod.
  sim.cluster.FailDeletes(0);
  sim.store.faults().Disable();
  sim.runtime.faults().Disable();
  sim.cluster.rpc_faults().Disable();
  for (int i = 0; i < kShares; ++i) {
    for (const auto& p : sim.cluster.Pods(Volume(i))) {
      sim.cluster.Freeze(p.pod.name, false);
      sim.cluster.SetReportedEpoch(p.pod.name, 0);
      sim.cluster.SetReportedVolume(p.pod.name, "");
      if (p.repair) sim.cluster.EndRepair(p.pod.name);
    }
  }
  for (int i = 0; i < kShares; ++i) {
    const std::string v = Volume(i);
    CAPTURE(v);
    bool converged = false;
    for (int pass = 0; pass < 400 && !converged; ++pass) {
      sim.Pass(v);
      const auto st = sim.Get(v).status();
      converged = st.phase() == pb::RUNNING && sim.cluster.LivePods(v) == 1 &&
                  st.remount_acknowledged_generation() == st.remount_requested_generation();
      sim.clock.Advance(250);
    }
    CHECK_MESSAGE(converged, sim.Get(v).ShortDebugString());
    const auto pods = sim.cluster.Pods(v);
    REQUIRE(pods.size() == 1);
    CHECK(pods[0].pod.epoch == sim.Get(v).status().epoch());
  }
}

}  // namespace

TEST_CASE("seeded simulation: random faults, invariants after every step, convergence after") {
  if (const char* seed = std::getenv("SHARE_SIM_SEED")) {
    RunSeed(std::strtoull(seed, nullptr, 10));
    return;
  }
  for (uint64_t seed = 1; seed <= 10; ++seed) RunSeed(seed);
}

// share-controller's runtime used to notify its already destroyed Controller
// from its own destructor (heap-use-after-free under ASan).
TEST_CASE("a store and a runtime that outlive their controller may still notify") {
  MemoryStore store;
  SimulatedCluster cluster;
  FakeWallClock clock;
  {
    Controller controller(store, cluster, cluster, clock, clock,
                          {.workers = 1, .watch_health = false});
    REQUIRE(controller.Start().ok());
  }
  ShareRecord record;
  record.set_name("late");
  record.mutable_spec()->set_volume("late");
  REQUIRE(store.Create(record).ok());  // notifies the gone controller's listener
  pb::ShareSpec spec;
  spec.set_volume("late");
  REQUIRE(cluster.Create(spec, 1).ok());  // so does this
}

}  // namespace controller
