// Regression tests for the field failures the reconciler exists to end, on a
// simulated cluster (the same reconciler also runs against real processes in
// tests/integration/controller_e2e_test.cc).
#include "controller/core/reconciler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <optional>

#include "controller/core/conditions.h"
#include "controller/runtime/grpc_share_connector.h"
#include "tests/controller/fake_share_manager.h"
#include "tests/controller/sim_fixture.h"

namespace controller {
namespace {

// The condition, failing the test (not crashing it) when there is none.
const Condition& RequireCondition(const ShareStatusRecord& status, const std::string& type) {
  const Condition* found = FindCondition(status, type);
  REQUIRE_MESSAGE(found != nullptr, "no ", type, " condition in ", status.ShortDebugString());
  return *found;
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

TEST_CASE("a new share gets epoch 1, one pod, and runs") {
  Sim sim;
  sim.AddShare("vol");
  REQUIRE(sim.RunUntilRunning("vol"));
  const auto record = sim.Get("vol");
  CHECK(record.status().epoch() == 1);
  CHECK(record.status().pod() == PodName("vol", 1));
  CHECK(sim.cluster.LivePods("vol") == 1);
  CHECK(ConditionTrue(record.status(), condition::kHealthy));
}

TEST_CASE(
    "no deadlock: a dead pod leaves RUNNING within one pass even when every Mount times out") {
  Sim sim;
  sim.AddShare("vol");
  REQUIRE(sim.RunUntilRunning("vol"));
  // A remount request is pending, and the share-manager's RPCs all time out.
  sim.cluster.SetReadOnly(sim.CurrentPod("vol"), true);
  sim.Pass("vol");
  REQUIRE(sim.Get("vol").status().remount_requested_generation() == 1);
  sim.clock.Advance(10'000);  // past the remount gate
  sim.cluster.rpc_faults().Randomize(1, 1.0);
  // ganesha died for good: share-manager exited 3, saying why.
  sim.cluster.Kill(sim.CurrentPod("vol"), 3, "exiting with code 3: ganesha died 6 times");

  sim.Pass("vol");
  const auto after = sim.Get("vol");
  CHECK(after.status().phase() == pb::ERROR);
  CHECK(after.status().reason() == "pod " + PodName("vol", 1) +
                                       " Failed with exit code 3: exiting with code 3: ganesha "
                                       "died 6 times");
  CHECK(sim.cluster.LivePods("vol") == 0);  // the dead pod was deleted in the same pass

  sim.Pass("vol");  // replacement, fenced by a new epoch recorded first
  CHECK(sim.Get("vol").status().epoch() == 2);
  CHECK(sim.cluster.LivePods("vol") == 1);
  sim.cluster.rpc_faults().Disable();
  REQUIRE(sim.RunUntilRunning("vol"));
  CHECK(sim.CurrentPod("vol") == PodName("vol", 2));
}

TEST_CASE(
    "no deadlock: a frozen share-manager is recorded unhealthy at once and replaced after the "
    "grace") {
  ReconcilerOptions options;
  options.unhealthy_grace_ms = 2000;
  Sim sim(options);
  sim.AddShare("vol");
  REQUIRE(sim.RunUntilRunning("vol"));
  const std::string frozen = sim.CurrentPod("vol");
  sim.cluster.Freeze(frozen, true);

  sim.Pass("vol");
  auto st = sim.Get("vol").status();
  CHECK_FALSE(ConditionTrue(st, condition::kHealthy));  // persisted in the first pass
  CHECK(RequireCondition(st, condition::kHealthy).message().find("unreachable") !=
        std::string::npos);
  CHECK(st.phase() == pb::RUNNING);  // within the grace

  sim.clock.Advance(2000);
  sim.Pass("vol");
  CHECK(sim.Get("vol").status().phase() == pb::ERROR);
  CHECK(sim.cluster.LivePods("vol") == 0);
  REQUIRE(sim.RunUntilRunning("vol"));
  CHECK(sim.Get("vol").status().epoch() == 2);
}

TEST_CASE(
    "no remount flood: 1000 read-only passes make one request, the gate fires once after its "
    "delay") {
  ReconcilerOptions options;
  options.remount_delay_ms = 5000;
  Sim sim(options);
  sim.AddShare("vol");
  REQUIRE(sim.RunUntilRunning("vol"));
  const std::string pod = sim.CurrentPod("vol");
  sim.cluster.SetReadOnly(pod, true);
  const int64_t start = sim.clock.NowMs();
  int64_t mounted_at = -1;
  for (int i = 0; i < 1000; ++i) {
    const auto result = sim.Pass("vol");
    const auto st = sim.Get("vol").status();
    CHECK(st.remount_requested_generation() == 1);  // one request, never re-stamped
    CHECK(st.remount_requested_unix_ms() == start);
    if (mounted_at < 0 && st.remount_acknowledged_generation() == 1) mounted_at = sim.clock.NowMs();
    if (mounted_at < 0) {
      // The gate waits by requeueing, never by dropping the work.
      REQUIRE(result.requeue_after_ms.has_value());
      CHECK(*result.requeue_after_ms > 0);
    }
    sim.clock.Advance(6);  // 1000 passes span 6 s: the 5 s gate falls inside
  }
  const auto pods = sim.cluster.Pods("vol");
  REQUIRE(pods.size() == 1);
  CHECK(pods[0].mounts == 1);
  CHECK(mounted_at >= start + 5000);
  CHECK(mounted_at <= start + 5000 + 6);
  CHECK_FALSE(ConditionTrue(sim.Get("vol").status(), condition::kReadOnly));
}

TEST_CASE("a new read-only event after a repair is a new request") {
  ReconcilerOptions options;
  options.remount_delay_ms = 0;
  Sim sim(options);
  sim.AddShare("vol");
  REQUIRE(sim.RunUntilRunning("vol"));
  for (uint64_t event = 1; event <= 3; ++event) {
    sim.cluster.SetReadOnly(sim.CurrentPod("vol"), true);
    for (int i = 0; i < 5; ++i) sim.Pass("vol");
    const auto st = sim.Get("vol").status();
    CHECK(st.remount_requested_generation() == event);
    CHECK(st.remount_acknowledged_generation() == event);
  }
}

TEST_CASE("stale-epoch calls are refused by the share-manager") {
  Sim sim;
  sim.AddShare("vol");
  REQUIRE(sim.RunUntilRunning("vol"));
  const auto pods = sim.cluster.List("vol");
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  const auto refused = sim.cluster.Mount((*pods)[0], 7, 1);
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("record before acting: a pass whose status write fails deletes no pod and creates none") {
  Sim sim;
  sim.AddRunningShare("vol");
  const std::string dead = sim.CurrentPod("vol");
  sim.cluster.Kill(dead, 3);
  const uint64_t deletes = sim.cluster.delete_calls();
  sim.store.faults().FailCall(2, Fault::kFail);  // the pass's Get, then its status write
  sim.Pass("vol");
  REQUIRE(sim.store.faults().fired() == 1);
  CHECK(sim.cluster.delete_calls() == deletes);  // nothing acted on an unrecorded ERROR
  CHECK(sim.cluster.Pods("vol").size() == 1);
  CHECK(sim.Get("vol").status().phase() == pb::RUNNING);
  sim.Pass("vol");  // recorded this time, then acted on
  CHECK(sim.Get("vol").status().phase() == pb::ERROR);
  CHECK(sim.cluster.delete_calls() == deletes + 1);
}

namespace {

// Forwards to a runtime, noting at each Create the epoch the store holds
// then; holds every start back while `held` (as the serving lease gate does
// while the old pod's lease is held), and, as the gate does with an epoch
// `recorded` (or `holder`) in etcd, every start at or below it.
class SpyRuntime final : public PodRuntime {
 public:
  SpyRuntime(PodRuntime& inner, Store& store) : inner_(inner), store_(store) {}
  absl::StatusOr<StartCheck> CheckStart(const pb::ShareSpec& spec, uint64_t epoch) override {
    checked.push_back(epoch);
    if (keep_taken && recorded) recorded = std::max(*recorded, epoch);
    if (std::max(recorded.value_or(0), holder.value_or(0)) >= epoch) {
      return StartCheck{.ready = ready_when_taken,
                        .retry_after_ms = 150,
                        .waiting_for = "an epoch above the one taken",
                        .recorded_epoch = recorded,
                        .holder_epoch = holder};
    }
    if (!held) {
      auto check = inner_.CheckStart(spec, epoch);
      if (check.ok()) {
        check->recorded_epoch = recorded;
        check->holder_epoch = holder;
      }
      return check;
    }
    return StartCheck{.ready = false, .retry_after_ms = 150, .waiting_for = "the old lease"};
  }
  absl::StatusOr<Pod> Create(const pb::ShareSpec& spec, uint64_t epoch) override {
    const auto record = store_.Get(spec.volume());
    stored.push_back(record.ok() ? record->status().epoch() : 0);
    created.push_back(epoch);
    return inner_.Create(spec, epoch);
  }
  absl::Status Delete(const std::string& pod) override { return inner_.Delete(pod); }
  absl::StatusOr<std::vector<Pod>> List(const std::string& volume) override {
    return inner_.List(volume);
  }
  void Watch(Listener listener) override { inner_.Watch(std::move(listener)); }

  bool held = false;
  // What etcd holds (as the gate reports it); keep_taken: each ask finds its
  // own epoch recorded already (another actor keeps ahead).
  std::optional<uint64_t> recorded, holder;
  bool keep_taken = false;
  // A gate that says ready although the epoch is taken.
  bool ready_when_taken = false;
  std::vector<uint64_t> stored, created, checked;

 private:
  PodRuntime& inner_;
  Store& store_;
};

// Share "vol" (running, or only added) reconciled through a SpyRuntime.
struct Spied {
  explicit Spied(bool running) {
    if (running) {
      sim.AddRunningShare("vol");
    } else {
      sim.AddShare("vol");
    }
  }
  // Passes 100 ms apart, at most `passes`, until `done`.
  void PassUntil(const std::function<bool()>& done, int passes) {
    for (int i = 0; i < passes && !done(); ++i) {
      reconciler.Reconcile("vol");
      sim.clock.Advance(100);
    }
  }
  Sim sim;
  SpyRuntime runtime{sim.cluster, sim.memory};
  Reconciler reconciler{sim.store, runtime, sim.cluster, sim.clock, sim.clock, sim.options};
};

}  // namespace

TEST_CASE("fence first: a replacement's epoch is in the store before its pod is created") {
  Spied s(true);
  s.sim.cluster.Kill(s.sim.CurrentPod("vol"), 3);
  s.PassUntil([&] { return !s.runtime.created.empty(); }, 10);
  REQUIRE(s.runtime.created.size() == 1);
  CHECK(s.runtime.created[0] == 2);
  CHECK(s.runtime.stored[0] == 2);
}

TEST_CASE(
    "a replacement held back by the runtime (the old serving lease): its epoch recorded, no pod "
    "until the runtime says go") {
  Sim sim;
  sim.AddRunningShare("vol");
  SpyRuntime runtime(sim.cluster, sim.memory);
  Reconciler reconciler(sim.store, runtime, sim.cluster, sim.clock, sim.clock, sim.options);
  runtime.held = true;
  sim.cluster.Kill(sim.CurrentPod("vol"), 3);
  PassResult last;
  for (int i = 0; i < 20; ++i) {
    last = reconciler.Reconcile("vol");
    sim.clock.Advance(100);
  }
  CHECK(runtime.created.empty());
  REQUIRE_FALSE(runtime.checked.empty());
  CHECK(runtime.checked.back() == 2);
  const auto waiting = sim.Get("vol").status();
  CHECK(waiting.epoch() == 2);  // fenced first: recorded before any pod exists
  CHECK(waiting.pod().empty());
  CHECK(waiting.phase() == pb::PENDING);
  CHECK(RequireCondition(waiting, condition::kWaitingToStart).message() == "the old lease");
  CHECK(ConditionTrue(waiting, condition::kWaitingToStart));
  CHECK(last.requeue_after_ms == 150);
  CHECK(sim.cluster.LivePods("vol") == 0);

  runtime.held = false;
  reconciler.Reconcile("vol");
  CHECK(runtime.created == std::vector<uint64_t>{2});
  CHECK_FALSE(ConditionTrue(sim.Get("vol").status(), condition::kWaitingToStart));
  CHECK(sim.Get("vol").status().pod() == PodName("vol", 2));
}

TEST_CASE(
    "epochs: an epoch recorded in etcd at or above the share's moves it to recorded + 1, persisted "
    "before its pod is created") {
  Spied s(false);
  s.runtime.recorded = 41;  // a record restored from an older copy, another deployment's
  s.PassUntil([&] { return !s.runtime.created.empty(); }, 5);
  CHECK(s.runtime.created == std::vector<uint64_t>{42});  // never under a lower epoch
  CHECK(s.runtime.stored == std::vector<uint64_t>{42});   // recorded before the pod existed
  const auto st = s.sim.Get("vol").status();
  CHECK(st.epoch() == 42);
  CHECK(st.pod() == PodName("vol", 42));
  CHECK(st.replacements() == 0);
  const Condition& advanced = RequireCondition(st, condition::kEpochAdvanced);
  CHECK(advanced.status());
  CHECK(advanced.reason() == "RecordedByOther");
  CHECK(advanced.message() == "epoch 1 is not above epoch 41 taken in etcd: moved to epoch 42");
  REQUIRE(s.sim.RunUntilRunning("vol"));
  CHECK(s.sim.CurrentPod("vol") == PodName("vol", 42));
}

TEST_CASE("epochs: a replacement below a live holder's epoch moves above it, and never backwards") {
  Spied s(true);
  s.runtime.recorded = 1;  // ours: below the replacement's epoch, nothing moves for it
  s.runtime.holder = 7;
  s.runtime.held = true;  // as the gate while that holder's key is there
  s.sim.cluster.Kill(s.sim.CurrentPod("vol"), 3);
  s.PassUntil([&] { return s.sim.Get("vol").status().epoch() >= 8; }, 5);
  CHECK(s.sim.Get("vol").status().epoch() == 8);
  CHECK(s.runtime.created.empty());  // the holder's key is still there: no pod yet
  s.runtime.holder.reset();
  s.runtime.held = false;
  s.runtime.recorded = 3;  // now lower than the share's: it stays at 8
  s.PassUntil([&] { return !s.runtime.created.empty(); }, 5);
  CHECK(s.runtime.created == std::vector<uint64_t>{8});
  CHECK(s.sim.Get("vol").status().epoch() == 8);
  for (const uint64_t checked : s.runtime.checked) CHECK(checked >= 2);
}

TEST_CASE(
    "epochs: the lease held by the share's own epoch (its pod not listed yet) is waited for, "
    "never moved above") {
  Spied s(false);
  s.runtime.recorded = 1;
  s.runtime.holder = 1;  // a pod of epoch 1 runs, though the runtime does not list it
  s.PassUntil([] { return false; }, 5);
  CHECK(s.runtime.created.empty());
  const auto st = s.sim.Get("vol").status();
  CHECK(st.epoch() == 1);
  CHECK(FindCondition(st, condition::kEpochAdvanced) == nullptr);
  CHECK(RequireCondition(st, condition::kWaitingToStart).message() ==
        "an epoch above the one taken");
}

TEST_CASE(
    "epochs: an epoch recorded implausibly far ahead is not followed, and the share says why") {
  Spied s(false);
  s.runtime.recorded = (uint64_t{1} << 32) + 2;  // 2^32 + 1 above epoch 1
  s.PassUntil([] { return false; }, 5);
  CHECK(s.runtime.created.empty());
  const auto st = s.sim.Get("vol").status();
  CHECK(st.epoch() == 1);
  CHECK(RequireCondition(st, condition::kWaitingToStart).message() ==
        "epoch 4294967298 taken in etcd is more than 4294967296 above epoch 1: not followed (mend "
        "the volume's epoch record by hand)");
  // Exactly 2^32 above: followed.
  s.runtime.recorded = (uint64_t{1} << 32) + 1;
  s.PassUntil([&] { return !s.runtime.created.empty(); }, 5);
  CHECK(s.runtime.created == std::vector<uint64_t>{(uint64_t{1} << 32) + 2});
}

TEST_CASE("epochs: a runtime saying ready under an epoch taken in etcd still creates nothing") {
  Spied s(false);
  s.runtime.recorded = 3;
  s.runtime.ready_when_taken = true;  // a gate that got it wrong
  s.runtime.keep_taken = true;        // and etcd moves on with each ask
  s.PassUntil([] { return false; }, 3);
  CHECK(s.runtime.created.empty());
}

TEST_CASE("two live pods are repaired: the one the status names stays, the other goes") {
  Sim sim;
  sim.AddShare("vol");
  REQUIRE(sim.RunUntilRunning("vol"));
  // An old pod of a previous epoch shows up again (e.g. a node came back).
  pb::ShareSpec spec;
  spec.set_volume("vol");
  REQUIRE(sim.cluster.Create(spec, 7).ok());
  REQUIRE(sim.cluster.LivePods("vol") == 2);
  sim.Pass("vol");
  CHECK(sim.cluster.LivePods("vol") == 1);
  CHECK(sim.cluster.Pods("vol")[0].pod.epoch == sim.Get("vol").status().epoch());
  CHECK(sim.RunUntilRunning("vol"));
}

TEST_CASE("a replacement waits until a reappeared pod of an older epoch is gone") {
  Sim sim;
  sim.AddRunningShare("vol");
  sim.cluster.Kill(sim.CurrentPod("vol"), 3);
  REQUIRE(sim.RunUntilRunning("vol"));
  REQUIRE(sim.Get("vol").status().epoch() == 2);
  sim.cluster.Kill(sim.CurrentPod("vol"), 3);
  sim.Pass("vol");  // ERROR: epoch 2's pod is deleted, and gone at once
  REQUIRE(sim.cluster.Pods("vol").empty());
  // Meanwhile a pod of epoch 1 shows up again (its node came back), slow to go.
  sim.cluster.SetDeleteLag(3000);
  pb::ShareSpec spec;
  spec.set_volume("vol");
  REQUIRE(sim.cluster.Create(spec, 1).ok());
  for (int i = 0; i < 50; ++i) {  // 5 s: past its deletion and the replacement backoff
    sim.Pass("vol");
    REQUIRE(sim.cluster.LivePods("vol") <= 1);
    sim.clock.Advance(100);
  }
  REQUIRE(sim.RunUntilRunning("vol"));
  CHECK(sim.Get("vol").status().epoch() == 3);
  CHECK(sim.cluster.LivePods("vol") == 1);
}

TEST_CASE("never two active: every store write and pod call failing in turn during a failover") {
  for (const char* target : {"store", "runtime"}) {
    for (Fault fault : {Fault::kFail, Fault::kTimeoutBefore, Fault::kTimeoutAfter}) {
      for (uint64_t k = 1; k <= 12; ++k) {
        CAPTURE(target);
        CAPTURE(static_cast<int>(fault));
        CAPTURE(k);
        Sim sim;
        sim.AddShare("vol");
        REQUIRE(sim.RunUntilRunning("vol"));
        const uint64_t old_epoch = sim.Get("vol").status().epoch();
        FaultInjector& faults =
            std::string(target) == "store" ? sim.store.faults() : sim.runtime.faults();
        faults.FailCall(k, fault);
        sim.cluster.Kill(sim.CurrentPod("vol"), 3);
        for (int pass = 0; pass < 40; ++pass) {
          sim.Pass("vol");
          // At no observed moment are there two live pods.
          REQUIRE(sim.cluster.LivePods("vol") <= 1);
          const auto st = sim.Get("vol").status();
          for (const auto& p : sim.cluster.Pods("vol")) {
            // A live pod is only ever the epoch the status names (or the one it replaces).
            if (p.pod.phase == PodPhase::kRunning) {
              CHECK((p.pod.epoch == st.epoch() || p.pod.epoch == old_epoch));
            }
          }
          sim.clock.Advance(500);
        }
        CHECK(faults.fired() == 1);  // the fault was really injected
        faults.Disable();
        REQUIRE(sim.RunUntilRunning("vol", 100, 500));
        CHECK(sim.cluster.LivePods("vol") == 1);
        CHECK(sim.Get("vol").status().epoch() > old_epoch);
        CHECK(sim.cluster.Pods("vol")[0].pod.epoch == sim.Get("vol").status().epoch());
      }
    }
  }
}

TEST_CASE("conditions change lastTransitionTime only when they flip") {
  ShareStatusRecord st;
  CHECK(SetCondition(st, "Healthy", true, "a", "", 100));
  CHECK_FALSE(SetCondition(st, "Healthy", true, "b", "still", 200));
  CHECK(RequireCondition(st, "Healthy").last_transition_unix_ms() == 100);
  CHECK(RequireCondition(st, "Healthy").reason() == "b");
  CHECK(SetCondition(st, "Healthy", false, "c", "", 300));
  CHECK(RequireCondition(st, "Healthy").last_transition_unix_ms() == 300);
}

TEST_CASE("statuses differing in any field but a condition message are not the same") {
  ShareStatusRecord base;
  SetCondition(base, "Healthy", true, "a", "details", 100);
  ShareStatusRecord other = base;
  other.mutable_conditions(0)->set_message("other details");
  CHECK(SameIgnoringMessages(base, other));
  // Every other field, of the status and of a condition, counts.
  auto differs = [](const google::protobuf::Message& m,
                    const google::protobuf::FieldDescriptor* f) {
    auto copy = std::unique_ptr<google::protobuf::Message>(m.New());
    copy->CopyFrom(m);
    const auto* r = copy->GetReflection();
    switch (f->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_STRING:
        r->SetString(copy.get(), f, "x");
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
        r->SetBool(copy.get(), f, !r->GetBool(m, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_ENUM:
        r->SetEnumValue(copy.get(), f, 3);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
        r->SetInt64(copy.get(), f, 7);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
        r->SetUInt64(copy.get(), f, 7);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT32:
        r->SetUInt32(copy.get(), f, 7);
        break;
      default:
        FAIL("unhandled field type of ", f->full_name());
    }
    return copy;
  };
  const auto* status_fields = ShareStatusRecord::descriptor();
  for (int i = 0; i < status_fields->field_count(); ++i) {
    const auto* f = status_fields->field(i);
    CAPTURE(f->full_name());
    if (f->is_repeated()) {
      ShareStatusRecord more = base;
      more.add_conditions()->set_type("ReadOnly");
      CHECK_FALSE(SameIgnoringMessages(base, more));
      continue;
    }
    const auto changed = differs(base, f);
    CHECK_FALSE(SameIgnoringMessages(base, static_cast<const ShareStatusRecord&>(*changed)));
  }
  const auto* condition_fields = Condition::descriptor();
  for (int i = 0; i < condition_fields->field_count(); ++i) {
    const auto* f = condition_fields->field(i);
    if (f->name() == "message") continue;
    CAPTURE(f->full_name());
    ShareStatusRecord changed = base;
    changed.mutable_conditions(0)->CopyFrom(
        static_cast<const Condition&>(*differs(base.conditions(0), f)));
    CHECK_FALSE(SameIgnoringMessages(base, changed));
  }
}

TEST_CASE(
    "a pending pod makes the share STARTING for the reason that the pod is pending, with PodReady "
    "false for reason Pending") {
  ShareRecord record = ServedShare("vol");
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

TEST_CASE("serve=false stops the share: pods deleted, STOPPED") {
  Sim sim;
  sim.AddShare("vol");
  REQUIRE(sim.RunUntilRunning("vol"));
  auto record = sim.Get("vol");
  record.mutable_spec()->set_serve(false);
  REQUIRE(sim.memory.Update(record).ok());
  sim.Pass("vol");
  sim.Pass("vol");
  CHECK(sim.cluster.LivePods("vol") == 0);
  CHECK(sim.Get("vol").status().phase() == pb::STOPPED);
  CHECK(sim.Get("vol").status().observed_spec_generation() == 2);
}

TEST_CASE(
    "hold_record: a share is held before its first pod is created, and a share asked to go is "
    "released only once no pod is left") {
  Sim sim;
  sim.AddShare("vol");
  sim.runtime.faults().FailCall(2, Fault::kFail);  // the first pass' Create (after its List)
  sim.Pass("vol");
  CHECK(sim.cluster.Pods("vol").empty());
  CHECK(sim.Get("vol").status().hold_record());  // written before the create was tried
  REQUIRE(sim.RunUntilRunning("vol"));

  auto record = sim.Get("vol");
  record.set_deletion_requested(true);  // as a store whose deletes wait sets it
  REQUIRE(sim.memory.Update(record).ok());
  sim.cluster.SetDeleteLag(1000);
  sim.Pass("vol");  // deletes the pod, which lingers while it stops
  REQUIRE_FALSE(sim.cluster.Pods("vol").empty());
  CHECK(sim.Get("vol").status().phase() == pb::STOPPING);
  CHECK(sim.Get("vol").status().hold_record());
  for (int i = 0; i < 50 && !sim.cluster.Pods("vol").empty(); ++i) {
    sim.clock.Advance(100);
    sim.Pass("vol");
  }
  REQUIRE(sim.cluster.Pods("vol").empty());
  sim.Pass("vol");
  const auto st = sim.Get("vol").status();
  CHECK(st.phase() == pb::STOPPED);
  CHECK(st.reason() == "deleted");
  CHECK_FALSE(st.hold_record());
  // Never served again, whatever its spec says.
  sim.clock.Advance(10'000);
  sim.Pass("vol");
  CHECK(sim.cluster.Pods("vol").empty());
}

TEST_CASE("transition hook: once per recorded change of phase or reason, with the status written") {
  Sim sim;
  std::vector<std::string> heard;
  sim.hooks.transition = [&](const std::string& share, const ShareStatusRecord& st) {
    heard.push_back(share + " " + pb::Phase_Name(st.phase()) + ": " + st.reason());
  };
  sim.Restart();
  sim.AddShare("vol");
  REQUIRE(sim.RunUntilRunning("vol"));
  const size_t started = heard.size();
  REQUIRE(started >= 1);
  CHECK(heard.back().rfind("vol RUNNING: ", 0) == 0);
  for (int i = 0; i < 5; ++i) sim.Pass("vol");  // nothing changes: nothing heard
  CHECK(heard.size() == started);
  sim.cluster.Kill(sim.CurrentPod("vol"), 3, "exiting with code 3: ganesha died");
  sim.Pass("vol");
  REQUIRE(heard.size() == started + 1);
  CHECK(heard.back() == "vol ERROR: pod " + PodName("vol", 1) +
                            " Failed with exit code 3: exiting with code 3: ganesha died");
}

TEST_CASE("hold_record: a record asked to go that was not held is never held anew") {
  // As Kubernetes refuses a finalizer added to an object being deleted (a
  // record from before holds existed, say): its pods still go.
  Sim sim;
  sim.AddShare("vol");
  REQUIRE(sim.RunUntilRunning("vol"));
  auto record = sim.Get("vol");
  record.mutable_status()->set_hold_record(false);
  record.set_deletion_requested(true);
  REQUIRE(sim.memory.Update(record).ok());
  sim.cluster.SetDeleteLag(1000);
  sim.Pass("vol");
  CHECK(sim.Get("vol").status().phase() == pb::STOPPING);
  CHECK_FALSE(sim.Get("vol").status().hold_record());
  CHECK(sim.cluster.LivePods("vol") <= 1);
}

// The repair contract (issue 9): a share-manager that answers and reports a
// repair within the budget keeps its pod and gets nothing that touches the device.
namespace {

constexpr char kFsck[] = "e2fsck -p /dev/sdb (after a filesystem error)";

// A share whose pod runs, then starts repairing: returns the pod.
std::string StartRepairing(Sim& sim, bool startup_check = false) {
  sim.AddShare("vol");
  if (startup_check) {
    sim.Pass("vol");  // creates the pod, which checks its filesystem before serving
  } else {
    REQUIRE(sim.RunUntilRunning("vol"));
  }
  const std::string pod = sim.CurrentPod("vol");
  sim.cluster.StartRepair(pod, kFsck, startup_check);
  return pod;
}

// Passes every step_ms for total_ms, checking the share stays REPAIRING on `pod`.
void RepairFor(Sim& sim, const std::string& pod, int64_t total_ms, int64_t step_ms) {
  for (int64_t t = 0; t < total_ms; t += step_ms) {
    const auto result = sim.Pass("vol");
    const auto st = sim.Get("vol").status();
    REQUIRE(st.phase() == pb::REPAIRING);
    REQUIRE(st.pod() == pod);
    REQUIRE(sim.cluster.LivePods("vol") == 1);
    REQUIRE(result.requeue_after_ms.has_value());  // re-observed, never forgotten
    sim.clock.Advance(step_ms);
  }
}

// The share keeps its pod for exactly the unhealthy grace from now, then is replaced.
void ReplacedAfterGrace(Sim& sim, int64_t grace_ms = ReconcilerOptions{}.unhealthy_grace_ms) {
  sim.Pass("vol");
  CHECK(sim.Get("vol").status().phase() == pb::RUNNING);  // not killed at once
  sim.clock.Advance(grace_ms - 1);
  sim.Pass("vol");
  CHECK(sim.Get("vol").status().phase() == pb::RUNNING);
  CHECK(sim.cluster.LivePods("vol") == 1);
  sim.clock.Advance(1);
  sim.Pass("vol");
  CHECK(sim.Get("vol").status().phase() == pb::ERROR);
  CHECK(sim.cluster.LivePods("vol") == 0);
}

uint64_t Mounts(Sim& sim) {
  const auto pods = sim.cluster.Pods("vol");
  return pods.size() == 1 ? pods[0].mounts : 0;
}

}  // namespace

TEST_CASE("repair: a share repairing past the grace and the start timeout is kept, gets no Mount") {
  for (const bool startup_check : {false, true}) {
    CAPTURE(startup_check);
    Sim sim;  // unhealthy grace 2 s, start timeout 30 s, repair budget 30 min
    const std::string pod = StartRepairing(sim, startup_check);
    sim.cluster.SetReadOnly(pod, true);  // a remount request is made, and must wait
    RepairFor(sim, pod, 10 * 60'000, 1000);
    const auto st = sim.Get("vol").status();
    CHECK(st.epoch() == 1);
    CHECK(st.remount_requested_generation() == 1);
    CHECK(Mounts(sim) == 0);
    CHECK(ConditionTrue(st, condition::kRepairing));
    CHECK(RequireCondition(st, condition::kRepairing).message() == kFsck);
    CHECK(st.reason().find(kFsck) != std::string::npos);
  }
}

TEST_CASE("repair: beyond the repair budget the share is ERROR and replaced") {
  ReconcilerOptions options;
  options.repair_budget_ms = 60'000;
  Sim sim(options);
  const std::string pod = StartRepairing(sim);
  RepairFor(sim, pod, 60'000, 5000);
  sim.clock.Advance(1);
  sim.Pass("vol");
  const auto st = sim.Get("vol").status();
  CHECK(st.phase() == pb::ERROR);
  CHECK(st.reason().find("repair exceeded the repair budget of 1m0s") != std::string::npos);
  CHECK(sim.cluster.LivePods("vol") == 0);
  REQUIRE(sim.RunUntilRunning("vol"));
  CHECK(sim.Get("vol").status().epoch() == 2);
  CHECK_FALSE(ConditionTrue(sim.Get("vol").status(), condition::kRepairing));
}

TEST_CASE("repair: an unreachable share that last said repairing is replaced after the grace") {
  Sim sim;
  const std::string pod = StartRepairing(sim);
  RepairFor(sim, pod, 5 * 60'000, 10'000);
  sim.cluster.Freeze(pod, true);  // its last status said "repairing"
  ReplacedAfterGrace(sim);        // counted from its last answer
  CHECK_FALSE(ConditionTrue(sim.Get("vol").status(), condition::kRepairing));
}

TEST_CASE("repair: after it ends, the unhealthy grace counts from its end") {
  Sim sim;
  const std::string pod = StartRepairing(sim);
  RepairFor(sim, pod, 10 * 60'000, 60'000);
  sim.cluster.EndRepair(pod, /*serving=*/false);
  ReplacedAfterGrace(sim);
}

TEST_CASE("repair: a pending remount is sent once, after the repair ends and its delay") {
  ReconcilerOptions options;
  options.remount_delay_ms = 5000;
  Sim sim(options);
  const std::string pod = StartRepairing(sim);
  sim.cluster.SetReadOnly(pod, true);
  RepairFor(sim, pod, 60'000, 100);
  CHECK(Mounts(sim) == 0);
  sim.cluster.EndRepair(pod);  // still read-only: the remount is still wanted
  const int64_t ended = sim.clock.NowMs();
  int64_t mounted_at = -1;
  for (int i = 0; i < 100 && mounted_at < 0; ++i) {
    sim.Pass("vol");
    if (Mounts(sim) > 0) mounted_at = sim.clock.NowMs();
    sim.clock.Advance(100);
  }
  CHECK(mounted_at >= ended + 5000);
  CHECK(mounted_at <= ended + 5100);
  for (int i = 0; i < 20; ++i) sim.Pass("vol");
  CHECK(Mounts(sim) == 1);
  const auto st = sim.Get("vol").status();
  CHECK(st.remount_acknowledged_generation() == 1);
  CHECK(st.phase() == pb::RUNNING);
}

TEST_CASE("repair: the record is not rewritten on every pass while an unchanged repair runs") {
  Sim sim;
  const std::string pod = StartRepairing(sim);
  sim.Pass("vol");
  const uint64_t version = sim.Get("vol").resource_version();
  RepairFor(sim, pod, 100'000, 1000);  // 100 passes
  CHECK(sim.Get("vol").resource_version() == version);
  // A new `what` is a change worth recording.
  sim.cluster.StartRepair(pod, "e2fsck -p /dev/sdb (second pass)");
  sim.Pass("vol");
  CHECK(sim.Get("vol").resource_version() > version);
}

TEST_CASE("repair: a report that carries another epoch is not honoured") {
  Sim sim;
  const std::string pod = StartRepairing(sim);
  sim.cluster.SetReportedEpoch(pod, 7);  // another server answers at the pod's endpoint
  ReplacedAfterGrace(sim);               // as if the pod did not answer at all
  const auto st = sim.Get("vol").status();
  CHECK_FALSE(ConditionTrue(st, condition::kRepairing));
  CHECK(RequireCondition(st, condition::kHealthy).message().find("epoch 7") != std::string::npos);
}

TEST_CASE("repair: the gRPC connector reports the repair a share-manager publishes") {
  const Pod pod{
      .name = PodName("vol", 3), .volume = "vol", .epoch = 3, .phase = PodPhase::kRunning};

  sharemanager::v1::ShareStatus published;
  published.set_state(sharemanager::v1::DEGRADED);
  published.set_volume("vol");
  published.set_epoch(3);
  published.set_volume_state(sharemanager::v1::VOLUME_REPAIRING);
  published.mutable_repair()->set_what(kFsck);
  published.mutable_repair()->set_elapsed_ms(420'000);
  auto seen = ObserveWith(published, pod);
  REQUIRE(seen.reachable);
  CHECK(seen.epoch == 3);
  CHECK(seen.volume_state == sharemanager::v1::VOLUME_REPAIRING);
  REQUIRE(seen.repair.has_value());
  CHECK(seen.repair->what == kFsck);
  CHECK(seen.repair->elapsed_ms == 420'000);

  published.clear_repair();  // the repair ended: none is reported
  published.set_volume_state(sharemanager::v1::VOLUME_MOUNTED);
  seen = ObserveWith(published, pod);
  REQUIRE(seen.reachable);
  CHECK(seen.volume_state == sharemanager::v1::VOLUME_MOUNTED);
  CHECK_FALSE(seen.repair.has_value());
}

// Issue 13: every duration on the monotonic clock, backoffs that hold,
// truthful phases after a failed Delete, escalation, generations and epochs.
namespace {

constexpr int64_t kHour = 3'600'000;

// Runs a pass every step_ms for total_ms.
void PassFor(Sim& sim, int64_t total_ms, int64_t step_ms) {
  for (int64_t t = 0; t < total_ms; t += step_ms) {
    sim.Pass("vol");
    sim.clock.Advance(step_ms);
  }
}

// Freezes the current pod and lets the default unhealthy grace run out; returns the pod.
std::string FreezePastGrace(Sim& sim) {
  const std::string pod = sim.CurrentPod("vol");
  sim.cluster.Freeze(pod, true);
  sim.Pass("vol");
  sim.clock.Advance(ReconcilerOptions{}.unhealthy_grace_ms);
  return pod;
}

}  // namespace

TEST_CASE("time: an unhealthy pod's grace follows the monotonic clock across wall steps of 1 h") {
  for (const int64_t step : {-kHour, kHour}) {
    CAPTURE(step);
    Sim sim;  // unhealthy grace 2 s
    sim.AddRunningShare("vol");
    sim.clock.StepWall(step);  // before the grace: the clocks disagree from its first mark
    sim.cluster.Freeze(sim.CurrentPod("vol"), true);
    sim.Pass("vol");
    sim.clock.Advance(1000);
    sim.clock.StepWall(step);  // and in the middle of it
    sim.Pass("vol");
    CHECK(sim.Get("vol").status().phase() == pb::RUNNING);
    sim.clock.Advance(999);
    sim.Pass("vol");
    CHECK(sim.Get("vol").status().phase() == pb::RUNNING);
    CHECK(sim.cluster.LivePods("vol") == 1);
    sim.clock.Advance(1);
    sim.Pass("vol");
    CHECK(sim.Get("vol").status().phase() == pb::ERROR);
    CHECK(sim.cluster.LivePods("vol") == 0);
  }
}

TEST_CASE("time: the remount delay follows the monotonic clock across wall steps of 1 h") {
  for (const int64_t step : {-kHour, kHour}) {
    CAPTURE(step);
    ReconcilerOptions options;
    options.remount_delay_ms = 5000;
    Sim sim(options);
    sim.AddRunningShare("vol");
    sim.cluster.SetReadOnly(sim.CurrentPod("vol"), true);
    sim.Pass("vol");  // the request, delay from now
    sim.clock.Advance(2000);
    sim.clock.StepWall(step);
    sim.Pass("vol");
    sim.clock.Advance(2999);
    sim.Pass("vol");
    CHECK(sim.cluster.mount_calls() == 0);
    sim.clock.Advance(1);
    sim.Pass("vol");
    CHECK(sim.cluster.mount_calls() == 1);
    CHECK(sim.Get("vol").status().remount_acknowledged_generation() == 1);
  }
}

TEST_CASE("time: the replacement backoff follows the monotonic clock across wall steps of 1 h") {
  for (const int64_t step : {-kHour, kHour}) {
    CAPTURE(step);
    Sim sim;  // replacement backoff 1 s after the first replacement
    sim.AddRunningShare("vol");
    sim.cluster.Kill(sim.CurrentPod("vol"), 3);
    sim.Pass("vol");
    sim.Pass("vol");  // first replacement: no backoff
    REQUIRE(sim.Get("vol").status().epoch() == 2);
    sim.cluster.Kill(sim.CurrentPod("vol"), 3);
    sim.Pass("vol");  // ERROR, deleted
    sim.clock.Advance(400);
    sim.clock.StepWall(step);
    sim.Pass("vol");
    CHECK(sim.Get("vol").status().epoch() == 2);  // backing off
    sim.clock.Advance(599);
    sim.Pass("vol");
    CHECK(sim.Get("vol").status().epoch() == 2);
    sim.clock.Advance(1);
    sim.Pass("vol");
    CHECK(sim.Get("vol").status().epoch() == 3);
    CHECK(sim.cluster.LivePods("vol") == 1);
  }
}

TEST_CASE("time: after a restart an unhealthy share gets a full grace from the first observation") {
  Sim sim;
  sim.AddRunningShare("vol");
  sim.cluster.Freeze(sim.CurrentPod("vol"), true);
  sim.Pass("vol");
  sim.clock.Advance(1900);
  sim.Restart();
  sim.clock.StepWall(kHour);  // the wall clock says the grace is long over
  ReplacedAfterGrace(sim);    // counted from the new process's first pass
}

TEST_CASE("backoff: a failing Delete is retried on its backoff, the record is not rewritten") {
  Sim sim;  // retry backoff 200 ms doubling
  sim.AddRunningShare("vol");
  FreezePastGrace(sim);
  sim.cluster.FailDeletes(-1);
  sim.Pass("vol");  // ERROR; the first Delete fails
  REQUIRE(sim.Get("vol").status().phase() == pb::ERROR);
  const uint64_t version = sim.Get("vol").resource_version();
  const uint64_t deletes = sim.cluster.delete_calls();
  sim.clock.Advance(10);
  PassFor(sim, 3000, 10);  // 300 passes over 3 s
  // Retries at +200, +600, +1400, +3000 ms: 3 or 4 more, not 300.
  CHECK(sim.cluster.delete_calls() - deletes <= 4);
  CHECK(sim.cluster.delete_calls() - deletes >= 3);
  // Nothing that changes from pass to pass is recorded: no rewrite at all.
  CHECK(sim.Get("vol").resource_version() == version);
  const auto st = sim.Get("vol").status();
  CHECK(st.phase() == pb::ERROR);
  CHECK(ConditionTrue(st, condition::kPodDeleteFailed));
  sim.cluster.FailDeletes(0);
  REQUIRE(sim.RunUntilRunning("vol", 100, 500));
  CHECK(sim.Get("vol").status().epoch() == 2);
  CHECK_FALSE(ConditionTrue(sim.Get("vol").status(), condition::kPodDeleteFailed));
}

TEST_CASE("backoff: a failing Mount backs off instead of being sent on every pass") {
  ReconcilerOptions options;
  options.remount_delay_ms = 0;
  Sim sim(options);
  sim.AddRunningShare("vol");
  sim.cluster.SetReadOnly(sim.CurrentPod("vol"), true);
  sim.cluster.FailMounts(-1);
  PassFor(sim, 3000, 10);
  // At 0, +200, +600, +1400 ms (+3000 is past the end).
  CHECK(sim.cluster.mount_calls() == 4);
  const auto result = sim.Pass("vol");
  CHECK(result.backing_off);
  CHECK(ConditionTrue(sim.Get("vol").status(), condition::kMountFailed));
  sim.cluster.FailMounts(0);
  PassFor(sim, 4000, 10);  // the pass above failed too: the next try is at +6200 ms
  CHECK(sim.Get("vol").status().remount_acknowledged_generation() == 1);
  CHECK_FALSE(ConditionTrue(sim.Get("vol").status(), condition::kMountFailed));
}

TEST_CASE("a condemned pod stays ERROR while its Delete fails, and the Delete is retried") {
  Sim sim;
  sim.AddRunningShare("vol");
  const std::string pod = FreezePastGrace(sim);
  sim.cluster.FailDeletes(-1);
  sim.Pass("vol");
  const uint64_t deletes = sim.cluster.delete_calls();
  for (int i = 0; i < 40; ++i) {  // 4 s, within the 30 s start timeout
    sim.clock.Advance(100);
    sim.Pass("vol");
    REQUIRE(sim.Get("vol").status().phase() == pb::ERROR);
    REQUIRE(sim.Get("vol").status().pod() == pod);
  }
  CHECK(sim.cluster.delete_calls() > deletes);  // retried meanwhile
  sim.cluster.FailDeletes(0);
  REQUIRE(sim.RunUntilRunning("vol", 100, 500));
  CHECK(sim.Get("vol").status().epoch() == 2);
}

TEST_CASE("escalate: a share read-only beyond the read-only budget is replaced") {
  ReconcilerOptions options;
  options.remount_delay_ms = 1000;
  options.readonly_budget_ms = 10'000;
  Sim sim(options);
  sim.AddRunningShare("vol");
  sim.cluster.SetReadOnly(sim.CurrentPod("vol"), true);
  sim.cluster.FailMounts(-1);  // no remount helps
  PassFor(sim, 9900, 100);
  CHECK(sim.Get("vol").status().phase() == pb::RUNNING);
  CHECK(sim.cluster.LivePods("vol") == 1);
  PassFor(sim, 200, 100);
  CHECK(sim.Get("vol").status().phase() == pb::ERROR);
  CHECK(sim.Get("vol").status().reason().find("read-only budget") != std::string::npos);
  sim.cluster.FailMounts(0);
  REQUIRE(sim.RunUntilRunning("vol"));
  CHECK(sim.Get("vol").status().epoch() == 2);
}

TEST_CASE("escalate: a share read-only again after 3 acknowledged remounts is replaced") {
  ReconcilerOptions options;
  options.remount_delay_ms = 0;
  Sim sim(options);
  sim.AddRunningShare("vol");
  const std::string pod = sim.CurrentPod("vol");
  for (int event = 1; event <= 3; ++event) {
    sim.cluster.SetReadOnly(pod, true);
    sim.Pass("vol");  // the request and its Mount
    sim.Pass("vol");
    REQUIRE(sim.Get("vol").status().phase() == pb::RUNNING);
    REQUIRE(sim.Get("vol").status().remount_acknowledged_generation() == event);
  }
  sim.cluster.SetReadOnly(pod, true);
  sim.Pass("vol");
  CHECK(sim.Get("vol").status().phase() == pb::ERROR);
  CHECK(sim.Get("vol").status().reason().find("after 3 remounts") != std::string::npos);
  REQUIRE(sim.RunUntilRunning("vol"));
  CHECK(sim.Get("vol").status().epoch() == 2);
}

TEST_CASE("escalate: a repairing read-only share is not replaced past the read-only budget") {
  ReconcilerOptions options;
  options.readonly_budget_ms = 10'000;
  Sim sim(options);
  const std::string pod = StartRepairing(sim);
  sim.cluster.SetReadOnly(pod, true);
  RepairFor(sim, pod, 60'000, 1000);
}

TEST_CASE("generations: an absurd handled generation is a bad answer, requests never wrap") {
  Sim sim;
  sim.AddRunningShare("vol");
  const std::string pod = sim.CurrentPod("vol");
  sim.cluster.SetHandledGeneration(pod, std::numeric_limits<uint64_t>::max() - 1);
  sim.cluster.SetReadOnly(pod, true);
  sim.Pass("vol");
  auto st = sim.Get("vol").status();
  CHECK(st.remount_acknowledged_generation() == 0);
  CHECK(st.remount_requested_generation() == 0);
  CHECK(RequireCondition(st, condition::kHealthy).message().find("above the requested") !=
        std::string::npos);
  ReplacedAfterGrace(sim, 2000 - 0);

  // A record already at the top stays there instead of wrapping to 0.
  Sim top;
  top.AddRunningShare("vol");
  auto record = top.Get("vol");
  record.mutable_status()->set_remount_requested_generation(std::numeric_limits<uint64_t>::max());
  record.mutable_status()->set_remount_acknowledged_generation(
      std::numeric_limits<uint64_t>::max());
  REQUIRE(top.memory.Update(record).ok());
  top.cluster.SetReadOnly(top.CurrentPod("vol"), true);
  top.Pass("vol");
  CHECK(top.Get("vol").status().remount_requested_generation() ==
        std::numeric_limits<uint64_t>::max());
}

TEST_CASE(
    "generations: a Mount answered with a generation above the request is refused as "
    "MountFailed naming both generations, and the pass backs off") {
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

TEST_CASE("epochs: a pod of a higher epoch than the record is adopted, not deleted") {
  Sim sim;
  sim.AddRunningShare("vol");
  pb::ShareSpec spec;
  spec.set_volume("vol");
  REQUIRE(sim.cluster.Create(spec, 5).ok());  // e.g. the record was restored from a backup
  sim.Pass("vol");
  CHECK(sim.Get("vol").status().epoch() == 5);
  const auto pods = sim.cluster.Pods("vol");
  REQUIRE(pods.size() == 1);
  CHECK(pods[0].pod.epoch == 5);  // the lower one went
  REQUIRE(sim.RunUntilRunning("vol"));
  sim.cluster.Kill(sim.CurrentPod("vol"), 3);
  REQUIRE(sim.RunUntilRunning("vol", 100, 500));
  CHECK(sim.Get("vol").status().epoch() == 6);  // above every epoch seen
}

TEST_CASE("a share record deleted from the store has its pods removed") {
  Sim sim;
  sim.AddRunningShare("vol");
  REQUIRE(sim.memory.Delete("vol").ok());
  sim.cluster.FailDeletes(1);
  const auto failed = sim.Pass("vol");
  CHECK_FALSE(failed.error.ok());  // retried with backoff
  CHECK(sim.cluster.LivePods("vol") == 1);
  sim.clock.Advance(200);
  const auto done = sim.Pass("vol");
  CHECK(done.error.ok());
  CHECK(sim.cluster.LivePods("vol") == 0);
  CHECK(sim.Pass("vol").requeue_after_ms == std::nullopt);  // nothing left to do
}

TEST_CASE("a pending remount gets a fresh delay on a replacement pod") {
  ReconcilerOptions options;
  options.remount_delay_ms = 5000;
  Sim sim(options);
  sim.AddRunningShare("vol");
  sim.cluster.SetReadOnly(sim.CurrentPod("vol"), true);
  sim.Pass("vol");  // requested now
  REQUIRE(sim.Get("vol").status().remount_requested_generation() == 1);
  sim.clock.Advance(1000);
  sim.cluster.Kill(sim.CurrentPod("vol"), 3);
  sim.Pass("vol");
  sim.Pass("vol");  // epoch 2 created
  REQUIRE(sim.Get("vol").status().epoch() == 2);
  sim.clock.Advance(4500);  // the old request's delay is over
  sim.Pass("vol");
  const int64_t first_seen = sim.clock.MonotonicMs();
  for (int i = 0; i < 60; ++i) {
    sim.clock.Advance(100);
    sim.Pass("vol");
    if (sim.cluster.mount_calls() > 0) break;
  }
  CHECK(sim.cluster.mount_calls() == 1);
  CHECK(sim.clock.MonotonicMs() >= first_seen + 5000);
}

TEST_CASE("restart mid-failover over the same store: one live pod, the failover completes") {
  Sim sim;
  sim.AddRunningShare("vol");
  sim.cluster.SetDeleteLag(3000);  // the old pod outlives its Delete
  FreezePastGrace(sim);
  sim.Pass("vol");  // ERROR, Delete accepted, the pod lingers
  REQUIRE(sim.Get("vol").status().phase() == pb::ERROR);
  for (int i = 0; i < 60; ++i) {
    if (i == 5) sim.Restart();
    if (i == 6) sim.clock.StepWall(-kHour);
    sim.Pass("vol");
    REQUIRE(sim.cluster.LivePods("vol") <= 1);
    sim.clock.Advance(100);
  }
  REQUIRE(sim.RunUntilRunning("vol", 100, 100));
  CHECK(sim.Get("vol").status().epoch() == 2);
  CHECK(sim.cluster.LivePods("vol") == 1);
}

}  // namespace controller

namespace controller {
namespace {

// What the reconciler's hooks reported, in order.
struct HookLog {
  std::vector<std::pair<std::string, pb::Phase>> phases;
  std::vector<std::string> removed;
  int replaced = 0;
  int conflicts = 0;

  ControllerHooks Hooks() {
    return {.phase = [this](const std::string& s, pb::Phase p) { phases.emplace_back(s, p); },
            .removed = [this](const std::string& s) { removed.push_back(s); },
            .replaced = [this] { replaced++; },
            .store_conflict = [this] { conflicts++; }};
  }
};

// Someone else writes the record just before each of the next `races` updates:
// each of them then carries a stale resource_version.
class RacingStore final : public Store {
 public:
  explicit RacingStore(Store& inner) : inner_(inner) {}
  absl::StatusOr<ShareRecord> Get(const std::string& name) override { return inner_.Get(name); }
  absl::StatusOr<std::vector<ShareRecord>> List() override { return inner_.List(); }
  absl::StatusOr<ShareRecord> Create(ShareRecord record) override { return inner_.Create(record); }
  absl::StatusOr<ShareRecord> Update(const ShareRecord& record) override {
    if (races > 0) {
      races--;
      auto current = inner_.Get(record.name());
      if (current.ok()) (void)inner_.Update(*current);
    }
    return inner_.Update(record);
  }
  absl::Status Delete(const std::string& name) override { return inner_.Delete(name); }
  void Watch(Listener listener) override { inner_.Watch(std::move(listener)); }

  int races = 0;

 private:
  Store& inner_;
};

}  // namespace

TEST_CASE("hooks: the phase each pass records, one replacement per new epoch, removal") {
  HookLog log;
  Sim sim;
  sim.hooks = log.Hooks();
  sim.Restart();
  sim.AddShare("vol");
  REQUIRE(sim.RunUntilRunning("vol"));
  REQUIRE_FALSE(log.phases.empty());
  CHECK(log.phases.front() == std::pair<std::string, pb::Phase>{"vol", pb::PENDING});
  CHECK(log.phases.back() == std::pair<std::string, pb::Phase>{"vol", pb::RUNNING});
  CHECK(log.replaced == 0);
  // A pass that changes nothing still reports the phase (after a restart the
  // controller learns every share's phase this way).
  const size_t before = log.phases.size();
  sim.Pass("vol");
  CHECK(log.phases.size() == before + 1);
  CHECK(log.phases.back().second == pb::RUNNING);

  sim.cluster.Kill(sim.CurrentPod("vol"), 3);
  REQUIRE(sim.RunUntilRunning("vol"));
  CHECK(sim.Get("vol").status().epoch() == 2);
  CHECK(log.replaced == 1);
  CHECK(log.conflicts == 0);
  CHECK(log.removed.empty());

  REQUIRE(sim.memory.Delete("vol").ok());
  sim.Pass("vol");
  CHECK(log.removed == std::vector<std::string>{"vol"});
}

TEST_CASE("hooks: a write refused for a stale resource_version is one store conflict") {
  HookLog log;
  MemoryStore memory;
  RacingStore racing(memory);
  SimulatedCluster cluster;
  FakeWallClock clock;
  Reconciler reconciler(racing, cluster, cluster, clock, clock, {}, log.Hooks());
  REQUIRE(memory.Create(ServedShare("vol")).ok());
  racing.races = 1;
  const PassResult result = reconciler.Reconcile("vol");
  CHECK(IsConflict(result.error));
  CHECK(log.conflicts == 1);
  CHECK(log.phases.empty());  // nothing was recorded
  CHECK(reconciler.Reconcile("vol").error.ok());
  CHECK(log.conflicts == 1);
  CHECK(log.phases.size() >= 1);
}

// A new pod template rolls out share by share through the replacement path:
// the epoch moves on first, the old pod goes, then the new one is made.
TEST_CASE("a new pod template rolls out one share at a time, never two pods of a share at once") {
  Sim sim;
  const std::vector<std::string> shares = {"a", "b", "c"};
  for (const auto& share : shares) sim.AddRunningShare(share);
  sim.cluster.SetDeleteLag(300);  // a termination grace: the old pod serves a while
  sim.cluster.NewTemplate();
  int max_rolling = 0;
  bool done = false;
  for (int round = 0; round < 200 && !done; ++round) {
    for (const auto& share : shares) sim.Pass(share);
    int rolling = 0;
    int not_running = 0;
    done = true;
    for (const auto& share : shares) {
      const ShareRecord record = sim.Get(share);
      rolling += ConditionTrue(record.status(), condition::kRollingOut);
      not_running += record.status().phase() != pb::RUNNING;
      CHECK(sim.cluster.LivePods(share) <= 1);
      const auto pods = sim.cluster.Pods(share);
      done = done && record.status().phase() == pb::RUNNING && record.status().epoch() == 2 &&
             !ConditionTrue(record.status(), condition::kRollingOut) && pods.size() == 1;
    }
    max_rolling = std::max(max_rolling, rolling);
    CHECK(not_running <= 1);
    sim.clock.Advance(100);
  }
  REQUIRE(done);
  CHECK(max_rolling == 1);
  for (const auto& share : shares) {
    const ShareRecord record = sim.Get(share);
    CHECK(record.status().replacements() == 0);  // a rollout is no failure: no backoff
    CHECK_FALSE(RequireCondition(record.status(), condition::kRollingOut).status());
    auto pods = sim.runtime.List(share);
    REQUIRE(pods.ok());
    REQUIRE(pods->size() == 1);
    CHECK_FALSE(pods->front().outdated);
  }
}

TEST_CASE("a rollout begun before a controller restart still holds the other shares back") {
  Sim sim;
  sim.AddRunningShare("a");
  sim.AddRunningShare("b");
  sim.cluster.SetDeleteLag(1000);
  sim.cluster.NewTemplate();
  const uint64_t deletes = sim.cluster.delete_calls();
  sim.Pass("a");
  REQUIRE(ConditionTrue(sim.Get("a").status(), condition::kRollingOut));
  CHECK(sim.Get("a").status().epoch() == 2);
  CHECK(sim.cluster.delete_calls() == deletes + 1);  // fenced in the pass that moved the epoch
  sim.Restart();  // the claim in memory is gone; the record's condition is not
  for (int i = 0; i < 5; ++i) {
    sim.Pass("b");
    sim.clock.Advance(100);
  }
  CHECK(sim.Get("b").status().epoch() == 1);
  CHECK(sim.Get("b").status().phase() == pb::RUNNING);
  REQUIRE(sim.RunUntilRunning("a"));
  CHECK_FALSE(ConditionTrue(sim.Get("a").status(), condition::kRollingOut));
  sim.Pass("b");
  CHECK(sim.Get("b").status().epoch() == 2);
  CHECK(ConditionTrue(sim.Get("b").status(), condition::kRollingOut));
}

TEST_CASE("an outdated pod whose export is read-only is remounted, not rolled out") {
  Sim sim;
  sim.AddRunningShare("a");
  sim.cluster.NewTemplate();
  sim.cluster.SetReadOnly(sim.CurrentPod("a"), true);
  sim.Pass("a");
  // Read-only is repaired by a remount, not a new pod: no rollout meanwhile.
  CHECK(sim.Get("a").status().epoch() == 1);
  CHECK_FALSE(ConditionTrue(sim.Get("a").status(), condition::kRollingOut));
}

// Seed "two active servers": the pod is deleted behind the controller's back
// (kubectl delete, a drain) and lingers while its node is slow to stop it.
TEST_CASE("a pod deleted by someone else: ERROR at once, its replacement only once it is gone") {
  Sim sim;
  sim.AddRunningShare("vol");
  const std::string pod = sim.CurrentPod("vol");
  sim.cluster.SetDeleteLag(5000);
  REQUIRE(sim.cluster.Delete(pod).ok());
  const uint64_t deletes = sim.cluster.delete_calls();
  for (int i = 0; i < 40; ++i) {  // 4 s of the 5 s it takes to stop
    sim.Pass("vol");
    CHECK(sim.cluster.Pods("vol").size() == 1);  // no second pod meanwhile
    sim.clock.Advance(100);
  }
  const ShareRecord waiting = sim.Get("vol");
  CHECK(waiting.status().phase() == pb::ERROR);
  CHECK(waiting.status().reason().find("is being deleted") != std::string::npos);
  CHECK(waiting.status().epoch() == 1);
  CHECK(sim.cluster.delete_calls() == deletes);  // its deletion is under way: not asked again
  sim.clock.Advance(1000);
  REQUIRE(sim.RunUntilRunning("vol"));
  CHECK(sim.Get("vol").status().epoch() == 2);
  CHECK(sim.cluster.Pods("vol").size() == 1);
}

}  // namespace controller
