// Cases the coverage report (scripts/coverage.sh, docs/COVERAGE.md) found no
// test running: names of out-of-range values, the store's NotFound and
// rollback paths, the fault injector's delay, a pending pod, a Mount answer
// above the request, and ShareClient's Unmount and health Check.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <filesystem>

#include "controller/conditions.h"
#include "controller/faulty_pod_runtime.h"
#include "controller/faulty_store.h"
#include "controller/memory_store.h"
#include "controller/pod_runtime.h"
#include "controller/reconciler.h"
#include "controller/share_client.h"
#include "tests/controller/fake_share_manager.h"
#include "tests/controller/sim_fixture.h"
#include "tests/support/temp_dir.h"

namespace controller {
namespace {

ShareRecord Share(const std::string& name) {
  ShareRecord record;
  record.set_name(name);
  record.mutable_spec()->set_volume(name);
  record.mutable_spec()->set_serve(true);
  return record;
}

// Answers every Mount with a generation above the one asked for.
class OverAnsweringConnector final : public ShareConnector {
 public:
  explicit OverAnsweringConnector(ShareConnector& inner) : inner_(inner) {}
  ShareObservation Observe(const Pod& pod) override { return inner_.Observe(pod); }
  absl::StatusOr<uint64_t> Mount(const Pod& pod, uint64_t epoch, uint64_t generation) override {
    auto handled = inner_.Mount(pod, epoch, generation);
    if (!handled.ok()) return handled;
    return generation + 5;
  }

 private:
  ShareConnector& inner_;
};

}  // namespace

TEST_CASE("coverage: pod phase names, an out-of-range phase included") {
  CHECK(std::string(PodPhaseName(PodPhase::kPending)) == "Pending");
  CHECK(std::string(PodPhaseName(PodPhase::kUnknown)) == "Unknown");
  CHECK(std::string(PodPhaseName(static_cast<PodPhase>(99))) == "Unknown");
}

TEST_CASE("coverage: the store's Update and Delete of a share it does not hold are NotFound") {
  MemoryStore store;
  CHECK(store.Update(Share("nope")).status().code() == absl::StatusCode::kNotFound);
  CHECK(store.Delete("nope").code() == absl::StatusCode::kNotFound);
}

TEST_CASE("coverage: a store change that cannot be written is undone in memory") {
  testing_support::TempDir dir;
  const std::string sub = dir.path() + "/store";
  std::filesystem::create_directory(sub);
  auto opened = MemoryStore::OpenFile(sub + "/shares");
  REQUIRE(opened.ok());
  MemoryStore& store = **opened;
  auto a = store.Create(Share("a"));
  REQUIRE(a.ok());
  std::filesystem::remove_all(sub);  // every later write fails: no directory for its temp file

  CHECK_FALSE(store.Create(Share("b")).ok());
  CHECK(store.Get("b").status().code() == absl::StatusCode::kNotFound);
  ShareRecord changed = *a;
  changed.mutable_spec()->set_serve(false);
  CHECK_FALSE(store.Update(changed).ok());
  CHECK(store.Get("a")->spec().serve());
  CHECK_FALSE(store.Delete("a").ok());
  CHECK(store.Get("a").ok());
}

TEST_CASE("coverage: faulty wrappers pass List, Delete and Watch through, a delay fault delays") {
  MemoryStore memory;
  FaultyStore store(memory);
  int heard = 0;
  store.Watch([&](const std::string&) { ++heard; });
  REQUIRE(store.Create(Share("a")).ok());
  CHECK(heard == 1);
  store.faults().SetDelay(std::chrono::milliseconds(20));
  CHECK(store.faults().delay() == std::chrono::milliseconds(20));
  store.faults().FailCall(1, Fault::kDelay);
  const auto start = std::chrono::steady_clock::now();
  auto listed = store.List();
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(20));
  REQUIRE(listed.ok());
  CHECK(listed->size() == 1);
  CHECK(store.Delete("a").ok());
  CHECK(store.faults().calls() == 3);  // Create, List, Delete

  FakeWallClock clock;
  SimulatedCluster cluster(&clock);
  FaultyPodRuntime runtime(cluster);
  int pod_events = 0;
  runtime.Watch([&](const std::string&) { ++pod_events; });
  pb::ShareSpec spec;
  spec.set_volume("v");
  REQUIRE(runtime.Create(spec, 1).ok());
  CHECK(pod_events > 0);
}

TEST_CASE("coverage: a pending pod makes the share STARTING with PodReady false") {
  ShareRecord record = Share("vol");
  record.mutable_status()->set_epoch(1);
  record.mutable_status()->set_pod(PodName("vol", 1));
  const Pod pod{
      .name = PodName("vol", 1), .volume = "vol", .epoch = 1, .phase = PodPhase::kPending};
  Observation observed{.current = &pod, .epoch = 1, .started = {1000, 1000}};
  ShareMarks marks;
  const auto st = ComputeStatus(record, observed, Now{1000, 1000}, marks, ReconcilerOptions{});
  CHECK(st.phase() == pb::STARTING);
  CHECK(st.reason() == "pod " + PodName("vol", 1) + " is pending");
  const Condition* ready = FindCondition(st, condition::kPodReady);
  REQUIRE(ready != nullptr);
  CHECK_FALSE(ready->status());
  CHECK(ready->reason() == "Pending");
}

TEST_CASE("coverage: a Mount answered with a generation above the request is not acknowledged") {
  ReconcilerOptions options;
  options.remount_delay_ms = 0;
  Sim sim(options);
  sim.AddRunningShare("vol");
  OverAnsweringConnector liar(sim.cluster);
  Reconciler reconciler(sim.store, sim.runtime, liar, sim.clock, sim.clock, options);
  sim.cluster.SetReadOnly(sim.CurrentPod("vol"), true);
  // The Mount takes effect (the next observation reports the generation
  // handled), but its answer is refused when it comes.
  std::string refused;
  for (int i = 0; i < 3 && refused.empty(); ++i) {
    const auto result = reconciler.Reconcile("vol");
    const auto st = sim.Get("vol").status();
    if (const Condition* failed = FindCondition(st, condition::kMountFailed);
        failed != nullptr && failed->status()) {
      refused = failed->message();
      CHECK(result.backing_off);
    }
  }
  CHECK(refused == "Mount answered generation 6, above the requested 1");
}

TEST_CASE("coverage: ShareClient's Unmount and health Check reach the server") {
  grpc::EnableDefaultHealthCheckService(true);  // this process only: one ctest entry per case
  sharemanager::v1::ShareStatus status;
  status.set_volume("vol");
  FixedServer server(status);
  ShareClient client(server.At(Pod{}).endpoint);
  // The stand-in implements no Unmount: the call arrives and is refused.
  CHECK(client.Unmount(1).code() == absl::StatusCode::kUnimplemented);
  auto serving = client.Check("");
  REQUIRE(serving.ok());
  CHECK(*serving);
  CHECK(client.Check("no-such-service").status().code() == absl::StatusCode::kNotFound);
}

}  // namespace controller
