// A share on a simulated cluster with fault-injecting store, runtime and RPCs,
// fake clocks (wall and monotonic), and one Reconciler: passes run one at a
// time, deterministically.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "controller/core/reconciler.h"
#include "controller/store/memory_store.h"
#include "controller/testing/faulty_pod_runtime.h"
#include "controller/testing/faulty_store.h"
#include "controller/testing/simulated_runtime.h"

namespace controller {

namespace pb = sharemanager::controller::v1;

// A share record asking for `volume` to be served, not yet in any store.
inline ShareRecord ServedShare(const std::string& volume) {
  ShareRecord record;
  record.set_name(volume);
  record.mutable_spec()->set_volume(volume);
  record.mutable_spec()->set_serve(true);
  return record;
}

struct Sim {
  explicit Sim(ReconcilerOptions reconciler_options = {}) : options(reconciler_options) {
    Restart();
  }

  void AddShare(const std::string& volume) { REQUIRE(memory.Create(ServedShare(volume)).ok()); }
  // A share whose first pod runs.
  void AddRunningShare(const std::string& volume) {
    AddShare(volume);
    REQUIRE(RunUntilRunning(volume));
  }
  ShareRecord Get(const std::string& name) {
    auto r = memory.Get(name);
    REQUIRE(r.ok());
    return *r;
  }
  PassResult Pass(const std::string& name) { return reconciler->Reconcile(name); }
  // A controller restart: a new Reconciler (no in-memory state) over the
  // same store, cluster and clocks.
  void Restart() {
    reconciler =
        std::make_unique<Reconciler>(store, runtime, cluster, clock, clock, options, hooks);
  }
  // Runs passes (advancing the clock by step_ms) until the share is RUNNING.
  bool RunUntilRunning(const std::string& name, int max_passes = 50, int64_t step_ms = 100) {
    for (int i = 0; i < max_passes; ++i) {
      Pass(name);
      if (Get(name).status().phase() == pb::RUNNING) return true;
      clock.Advance(step_ms);
    }
    return false;
  }
  std::string CurrentPod(const std::string& name) { return Get(name).status().pod(); }

  ReconcilerOptions options;
  ControllerHooks hooks;  // a Restart() hands them to the new Reconciler
  FakeWallClock clock;    // before the cluster: it reports repair times on it
  MemoryStore memory;
  FaultyStore store{memory};
  SimulatedCluster cluster{&clock};
  // Every pod call of the reconciler goes through the fault injector.
  FaultyPodRuntime runtime{cluster};
  std::unique_ptr<Reconciler> reconciler;
};

}  // namespace controller
