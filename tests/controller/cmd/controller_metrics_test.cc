// share-controller's metrics bound to a real Controller over the simulated
// cluster: shares by phase, passes, queue depth; and each hook on its own.
#include "controller/cmd/controller_metrics.h"

#include <doctest/doctest.h>

#include "controller/core/controller.h"
#include "controller/store/memory_store.h"
#include "controller/testing/simulated_runtime.h"
#include "tests/controller/sim_fixture.h"
#include "tests/metrics/collected.h"
#include "tests/support/wait_for.h"

namespace controller {
namespace {

using std::chrono::milliseconds;
using testing_support::Collected;

double Phase(const ControllerMetrics& m, const char* phase) {
  return Collected(*m.catalogue()).Value("sharemgr_controller_shares", {{"phase", phase}});
}

}  // namespace

TEST_CASE("controller metrics: shares by phase, every phase present, a removed share gone") {
  ControllerMetrics m;
  for (const char* p :
       {"PENDING", "STARTING", "RUNNING", "ERROR", "STOPPING", "STOPPED", "REPAIRING"}) {
    CHECK(Phase(m, p) == 0);
  }
  CHECK(Collected(*m.catalogue())
            .Find("sharemgr_controller_shares", {{"phase", "PHASE_UNSPECIFIED"}}) == nullptr);
  auto hooks = m.Hooks();
  hooks.phase("a", pb::RUNNING);
  hooks.phase("b", pb::RUNNING);
  hooks.phase("c", pb::STARTING);
  hooks.phase("c", pb::ERROR);
  CHECK(Phase(m, "RUNNING") == 2);
  CHECK(Phase(m, "STARTING") == 0);
  CHECK(Phase(m, "ERROR") == 1);
  hooks.removed("a");
  CHECK(Phase(m, "RUNNING") == 1);
}

TEST_CASE("controller metrics: replacements, conflicts, passes, RPC errors by method and code") {
  ControllerMetrics m;
  auto hooks = m.Hooks();
  hooks.replaced();
  hooks.store_conflict();
  hooks.store_conflict();
  hooks.pass(milliseconds(2), true);
  hooks.pass(milliseconds(4), false);
  m.RpcErrors()("GetStatus", absl::StatusCode::kDeadlineExceeded);
  m.RpcErrors()("Mount", absl::StatusCode::kFailedPrecondition);
  m.RpcErrors()("GetStatus", absl::StatusCode::kDeadlineExceeded);
  const Collected now(*m.catalogue());
  CHECK(now.Value("sharemgr_controller_replacements_total") == 1);
  CHECK(now.Value("sharemgr_controller_store_conflicts_total") == 2);
  CHECK(now.Value("sharemgr_controller_reconcile_passes_total", {{"result", "ok"}}) == 1);
  CHECK(now.Value("sharemgr_controller_reconcile_passes_total", {{"result", "error"}}) == 1);
  CHECK(now.HistogramCount("sharemgr_controller_reconcile_duration_seconds") == 2);
  CHECK(now.HistogramSum("sharemgr_controller_reconcile_duration_seconds") ==
        doctest::Approx(0.006));
  CHECK(now.Value("sharemgr_controller_rpc_errors_total",
                  {{"method", "GetStatus"}, {"code", "DEADLINE_EXCEEDED"}}) == 2);
  CHECK(now.Value("sharemgr_controller_rpc_errors_total",
                  {{"method", "Mount"}, {"code", "FAILED_PRECONDITION"}}) == 1);
  // No queue to read yet: no samples rather than a made-up zero.
  CHECK(now.Samples("sharemgr_controller_queue_depth") == 0);
}

TEST_CASE("controller metrics: a real Controller reports its shares, passes and queue") {
  ControllerMetrics m;
  MemoryStore store;
  SimulatedCluster cluster;
  FakeWallClock clock;
  ReconcilerOptions fast;
  fast.resync_ms = 20;  // requeues come on the queue's real clock
  Controller controller(
      store, cluster, cluster, clock, clock,
      {.workers = 1, .reconciler = fast, .watch_health = false, .hooks = m.Hooks()});
  m.SetQueueDepth([&controller] { return controller.QueueDepth(); });
  REQUIRE(store.Create(ServedShare("vol")).ok());
  REQUIRE(controller.Start().ok());
  // The simulated pod serves once time passes; the resync requeues the share.
  REQUIRE(testing_support::WaitFor(
      [&] {
        clock.Advance(100);
        return Phase(m, "RUNNING") == 1;
      },
      milliseconds(10'000)));
  controller.Stop();
  const Collected now(*m.catalogue());
  const double passes =
      now.Value("sharemgr_controller_reconcile_passes_total", {{"result", "ok"}}) +
      now.Value("sharemgr_controller_reconcile_passes_total", {{"result", "error"}});
  CHECK(passes >= 2);
  CHECK(static_cast<double>(now.HistogramCount("sharemgr_controller_reconcile_duration_seconds")) ==
        passes);
  CHECK(now.Samples("sharemgr_controller_queue_depth") == 1);
  CHECK(now.Samples("sharemgr_controller_queue_delayed") == 1);
  CHECK(now.Value("sharemgr_controller_replacements_total") == 0);
}

}  // namespace controller
