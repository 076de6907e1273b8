#include "controller/reconciler.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "controller/conditions.h"

namespace controller {
namespace {

namespace v1 = sharemanager::controller::v1;
using sharemanager::v1::ShareState;

bool IsDead(PodPhase phase) { return phase == PodPhase::kSucceeded || phase == PodPhase::kFailed; }

// Sets a condition false only if it exists, so healthy shares carry no noise.
void ClearCondition(ShareStatusRecord& status, const std::string& type, int64_t now) {
  if (FindCondition(status, type) != nullptr) SetCondition(status, type, false, "", "", now);
}

void SetPhase(ShareStatusRecord& status, v1::Phase phase, std::string reason) {
  status.set_phase(phase);
  status.set_reason(std::move(reason));
}

std::string Describe(const ShareObservation& share) {
  if (!share.reachable) return absl::StrCat("unreachable: ", share.error);
  return absl::StrCat(sharemanager::v1::ShareState_Name(share.state), ": ", share.reason);
}

// The share-manager's word counts only from the pod the record names: an
// answer for another epoch (an old server still on the endpoint) is no answer.
std::optional<ShareObservation> FromCurrentPod(const std::optional<ShareObservation>& share,
                                               uint64_t epoch) {
  if (!share || !share->reachable || share->epoch == epoch) return share;
  return ShareObservation{.error =
                              absl::StrCat("answered for epoch ", share->epoch, ", not ", epoch)};
}

// When the last honoured repair ended (0: none did). The unhealthy grace and
// the remount delay count from there: a pod that just finished a long repair
// gets its grace instead of being judged by how long the repair took.
int64_t RepairEndedMs(const ShareStatusRecord& status) {
  const Condition* c = FindCondition(status, condition::kRepairing);
  return c != nullptr && !c->status() ? c->last_transition_unix_ms() : 0;
}

}  // namespace

ShareStatusRecord ComputeStatus(const ShareRecord& record, const Observation& observed, int64_t now,
                                const ReconcilerOptions& options) {
  ShareStatusRecord st = record.status();
  st.set_observed_spec_generation(record.spec_generation());
  if (st.epoch() == 0) st.set_epoch(1);
  const Pod* pod = observed.current;
  st.set_endpoint(pod != nullptr ? pod->endpoint : "");
  if (pod != nullptr && st.pod().empty()) {
    st.set_pod(pod->name);  // created by a call whose answer was lost: adopt it
    st.set_pod_created_unix_ms(now);
  }
  const std::optional<ShareObservation> answered = FromCurrentPod(observed.share, st.epoch());
  // A repair claim is honoured only while the peer answers; a frozen or gone
  // share-manager's last word is not kept.
  const RepairObservation* repair =
      answered && answered->reachable && answered->repair ? &*answered->repair : nullptr;
  if (repair != nullptr) {
    SetCondition(st, condition::kRepairing, true, "Repairing", repair->what, now);
  } else if (FindCondition(st, condition::kRepairing) != nullptr) {
    SetCondition(st, condition::kRepairing, false,
                 answered && answered->reachable ? "Finished" : "NotReported", "", now);
  }

  if (!record.spec().serve()) {
    const bool none = pod == nullptr && observed.stale.empty();
    SetPhase(st, none ? v1::STOPPED : v1::STOPPING,
             none ? "not served" : "deleting share-manager pods");
    return st;
  }
  if (pod == nullptr) {
    if (st.pod().empty()) {
      SetPhase(st, v1::PENDING, absl::StrCat("creating a pod for epoch ", st.epoch()));
    } else {
      SetPhase(st, v1::ERROR, absl::StrCat("pod ", st.pod(), " is gone"));
      SetCondition(st, condition::kPodReady, false, "PodGone", st.reason(), now);
    }
    return st;
  }
  if (pod->phase == PodPhase::kPending) {
    SetPhase(st, v1::STARTING, absl::StrCat("pod ", pod->name, " is pending"));
    SetCondition(st, condition::kPodReady, false, "Pending", "", now);
    return st;
  }
  if (IsDead(pod->phase)) {
    SetPhase(st, v1::ERROR,
             absl::StrCat("pod ", pod->name, " ", PodPhaseName(pod->phase), " with exit code ",
                          pod->exit_code));
    SetCondition(st, condition::kPodReady, false, std::string(PodPhaseName(pod->phase)),
                 st.reason(), now);
    return st;
  }

  // Running (or Unknown): the share-manager's own word decides.
  SetCondition(st, condition::kPodReady, pod->phase == PodPhase::kRunning,
               std::string(PodPhaseName(pod->phase)), "", now);
  const ShareObservation share = answered.value_or(
      ShareObservation{.error = absl::StrCat("pod phase ", PodPhaseName(pod->phase))});
  const bool serving = share.reachable && share.state == sharemanager::v1::SERVING;
  SetCondition(st, condition::kHealthy, serving, serving ? "Serving" : "NotServing",
               serving ? "" : Describe(share),
               observed.started_ms != 0 ? observed.started_ms : now);
  if (share.reachable) {
    st.set_remount_acknowledged_generation(
        std::max(st.remount_acknowledged_generation(), share.handled_generation));
    // A request is an edge: only the flip to read-only creates one.
    if (SetCondition(st, condition::kReadOnly, share.read_only,
                     share.read_only ? "ReadOnlyFilesystem" : "Writable", "", now) &&
        share.read_only) {
      st.set_remount_requested_generation(
          std::max(st.remount_requested_generation(), st.remount_acknowledged_generation()) + 1);
      st.set_remount_requested_unix_ms(now);
    }
  }

  if (share.reachable && share.state == sharemanager::v1::FAILED) {
    SetPhase(st, v1::ERROR, absl::StrCat("share-manager FAILED: ", share.reason));
  } else if (repair != nullptr && repair->elapsed_ms > options.repair_budget_ms) {
    SetPhase(st, v1::ERROR,
             absl::StrCat("repair exceeded the repair budget of ",
                          base::FormatDuration(base::Duration(options.repair_budget_ms)), ": ",
                          repair->what));
  } else if (repair != nullptr) {
    // No elapsed time here: the record is rewritten when the repair changes,
    // not on every pass while it runs.
    SetPhase(st, v1::REPAIRING, absl::StrCat("repairing: ", repair->what));
  } else if (share.reachable && share.read_only) {
    // A read-only export is repaired by a remount, not by a new pod.
    SetPhase(st, v1::RUNNING, "export read-only; remount requested");
  } else if (serving) {
    SetPhase(st, v1::RUNNING, "serving");
    if (now - st.last_replacement_unix_ms() >= options.stable_ms) st.set_replacements(0);
  } else {
    const v1::Phase before = record.status().phase();
    // Right after a repair, a share-manager still STARTING was in its
    // start-up check and gets the start timeout; any other had served.
    const bool served_before = before == v1::RUNNING || (before == v1::REPAIRING &&
                                                         share.state != sharemanager::v1::STARTING);
    const int64_t grace = served_before ? options.unhealthy_grace_ms : options.start_timeout_ms;
    const int64_t since =
        std::max({FindCondition(st, condition::kHealthy)->last_transition_unix_ms(),
                  st.pod_created_unix_ms(), RepairEndedMs(st)});
    if (now - since >= grace) {
      SetPhase(st, v1::ERROR,
               absl::StrCat("not serving for ", now - since, " ms: ", Describe(share)));
    } else {
      SetPhase(st, served_before ? v1::RUNNING : v1::STARTING,
               absl::StrCat(served_before ? "unhealthy, within grace: " : "starting: ",
                            Describe(share)));
    }
  }
  return st;
}

Reconciler::Reconciler(Store& store, PodRuntime& runtime, ShareConnector& connector,
                       const WallClock& clock, ReconcilerOptions options)
    : store_(store), runtime_(runtime), connector_(connector), clock_(clock), options_(options) {}

absl::Status Reconciler::Persist(ShareRecord& record, const ShareStatusRecord& status) {
  if (google::protobuf::util::MessageDifferencer::Equals(record.status(), status)) {
    return absl::OkStatus();
  }
  ShareRecord next = record;
  *next.mutable_status() = status;
  auto stored = store_.Update(next);
  if (!stored.ok()) return stored.status();
  record = *std::move(stored);
  return absl::OkStatus();
}

int64_t Reconciler::ReplaceBackoff(const ShareStatusRecord& status) const {
  if (status.replacements() == 0) return 0;
  int64_t backoff = options_.replace_backoff_initial_ms;
  for (uint32_t i = 1; i < status.replacements() && backoff < options_.replace_backoff_max_ms;
       ++i) {
    backoff *= 2;
  }
  return std::min(backoff, options_.replace_backoff_max_ms);
}

PassResult Reconciler::Reconcile(const std::string& name) {
  auto got = store_.Get(name);
  if (!got.ok()) {
    if (got.status().code() == absl::StatusCode::kNotFound) return {};
    return {.requeue_after_ms = std::nullopt, .error = got.status()};
  }
  ShareRecord record = *std::move(got);
  const int64_t started = clock_.NowMs();

  // Observe.
  auto pods = runtime_.List(record.spec().volume());
  if (!pods.ok()) {
    ShareStatusRecord st = record.status();
    SetCondition(st, condition::kRuntimeUnavailable, true, "ListFailed",
                 std::string(pods.status().message()), started);
    const auto persisted = Persist(record, st);
    return {.requeue_after_ms = std::nullopt, .error = persisted.ok() ? pods.status() : persisted};
  }
  const uint64_t epoch = std::max<uint64_t>(record.status().epoch(), 1);
  Observation observed{.started_ms = started};
  for (const Pod& pod : *pods) {
    if (pod.epoch == epoch) {
      observed.current = &pod;
    } else {
      observed.stale.push_back(&pod);
    }
  }
  if (observed.current != nullptr && !IsDead(observed.current->phase) &&
      observed.current->phase != PodPhase::kPending) {
    observed.share = connector_.Observe(*observed.current);
  }
  const int64_t now = clock_.NowMs();

  // Compute and record, before any action.
  ShareStatusRecord st = ComputeStatus(record, observed, now, options_);
  ClearCondition(st, condition::kRuntimeUnavailable, now);
  if (auto s = Persist(record, st); !s.ok()) return {.requeue_after_ms = std::nullopt, .error = s};

  // Act. Fence first: pods of other epochs go, whatever else happens.
  std::string delete_error;
  for (const Pod* pod : observed.stale) {
    if (auto s = runtime_.Delete(pod->name); !s.ok()) delete_error = std::string(s.message());
  }
  const Pod* current = observed.current;
  const bool replace = current != nullptr && (st.phase() == v1::ERROR || !record.spec().serve());
  if (replace) {
    if (auto s = runtime_.Delete(current->name); !s.ok()) delete_error = std::string(s.message());
  }
  if (!delete_error.empty() || FindCondition(st, condition::kPodDeleteFailed) != nullptr) {
    SetCondition(st, condition::kPodDeleteFailed, !delete_error.empty(), "DeleteFailed",
                 delete_error, now);
    if (auto s = Persist(record, st); !s.ok())
      return {.requeue_after_ms = std::nullopt, .error = s};
  }
  if (!delete_error.empty()) {
    return {.requeue_after_ms = std::nullopt, .error = absl::UnavailableError(delete_error)};
  }
  if (!record.spec().serve()) {
    return {.requeue_after_ms = st.phase() == v1::STOPPED
                                    ? std::nullopt
                                    : std::optional<int64_t>(options_.resync_ms)};
  }
  if (replace || !observed.stale.empty()) {
    return {.requeue_after_ms = 0};  // create the replacement once the deletions are observed
  }
  if (current == nullptr) return CreatePod(record, st, now);

  // Remount: one request per read-only event; the gate requeues, never drops.
  // Nothing that touches the device goes to a repairing share: the request
  // waits for the repair's end (the resync requeues it) and its delay.
  const auto answered = FromCurrentPod(observed.share, st.epoch());
  if (answered && answered->reachable && st.phase() != v1::REPAIRING &&
      st.remount_requested_generation() > st.remount_acknowledged_generation()) {
    const int64_t due =
        std::max(st.remount_requested_unix_ms(), RepairEndedMs(st)) + options_.remount_delay_ms;
    if (now < due) return {.requeue_after_ms = std::min(due - now, options_.resync_ms)};
    auto handled = connector_.Mount(*current, st.epoch(), st.remount_requested_generation());
    if (handled.ok()) {
      st.set_remount_acknowledged_generation(
          std::max(st.remount_acknowledged_generation(), *handled));
      ClearCondition(st, condition::kMountFailed, now);
    } else {
      SetCondition(st, condition::kMountFailed, true, "MountFailed",
                   std::string(handled.status().message()), now);
    }
    if (auto s = Persist(record, st); !s.ok())
      return {.requeue_after_ms = std::nullopt, .error = s};
  }
  return {.requeue_after_ms = options_.resync_ms};
}

PassResult Reconciler::CreatePod(ShareRecord& record, ShareStatusRecord st, int64_t now) {
  if (!st.pod().empty()) {
    // The epoch's pod is gone: fence it by moving to the next epoch, recorded
    // before the new pod exists, so nothing can act for the old one again.
    const int64_t wait = st.last_replacement_unix_ms() + ReplaceBackoff(st) - now;
    if (wait > 0) return {.requeue_after_ms = wait};
    st.set_epoch(st.epoch() + 1);
    st.set_pod("");
    st.set_endpoint("");
    st.set_replacements(st.replacements() + 1);
    st.set_last_replacement_unix_ms(now);
    SetPhase(st, v1::PENDING, absl::StrCat("replacing the pod with epoch ", st.epoch()));
    if (auto s = Persist(record, st); !s.ok())
      return {.requeue_after_ms = std::nullopt, .error = s};
  }
  auto pod = runtime_.Create(record.spec(), st.epoch());
  if (!pod.ok()) {
    SetCondition(st, condition::kPodCreateFailed, true, "CreateFailed",
                 std::string(pod.status().message()), now);
    const auto s = Persist(record, st);
    return {.requeue_after_ms = std::nullopt, .error = s.ok() ? pod.status() : s};
  }
  st.set_pod(pod->name);
  st.set_endpoint(pod->endpoint);
  st.set_pod_created_unix_ms(now);
  SetPhase(st, v1::STARTING, absl::StrCat("created pod ", pod->name));
  ClearCondition(st, condition::kPodCreateFailed, now);
  if (auto s = Persist(record, st); !s.ok()) return {.requeue_after_ms = std::nullopt, .error = s};
  return {.requeue_after_ms = options_.resync_ms};
}

}  // namespace controller
