#include "controller/core/reconciler.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "controller/core/conditions.h"

namespace controller {
namespace {

namespace v1 = sharemanager::controller::v1;
using sharemanager::v1::ShareState;

bool IsDead(PodPhase phase) { return phase == PodPhase::kSucceeded || phase == PodPhase::kFailed; }

// A share asked to go is served no more, whatever its spec says.
bool ShouldServe(const ShareRecord& record) {
  return record.spec().serve() && !record.deletion_requested();
}

// Counters never wrap: a wrapped generation or epoch would look like the
// oldest one and undo the fencing it exists for.
uint64_t SaturatingIncrement(uint64_t v) {
  return v == std::numeric_limits<uint64_t>::max() ? v : v + 1;
}

// The highest epoch the runtime saw taken (0: none).
uint64_t TakenEpoch(const StartCheck& check) {
  return std::max(check.recorded_epoch.value_or(0), check.holder_epoch.value_or(0));
}

// Whether a share of `epoch` may move above what etcd holds: not when its
// own pod holds the lease (alive, only not listed yet: moving on would
// replace it), nor to an epoch implausibly far ahead (a record mangled or
// hostile: the share would be stuck near the end of the epochs for good; a
// human mends the record).
constexpr uint64_t kMaxEpochAdvance = uint64_t{1} << 32;
bool MayMoveAbove(const StartCheck& check, uint64_t epoch) {
  if (check.holder_epoch == epoch && check.recorded_epoch.value_or(0) <= epoch) return false;
  return TakenEpoch(check) <= epoch || TakenEpoch(check) - epoch <= kMaxEpochAdvance;
}

// Why a share waits to start: the runtime's words, or the epoch it will not follow.
std::string WaitingFor(const StartCheck& check, uint64_t epoch) {
  if (!MayMoveAbove(check, epoch) && TakenEpoch(check) > epoch) {
    return absl::StrCat("epoch ", TakenEpoch(check), " taken in etcd is more than ",
                        kMaxEpochAdvance, " above epoch ", epoch,
                        ": not followed (mend the volume's epoch record by hand)");
  }
  if (check.waiting_for.empty())
    return absl::StrCat("an epoch above ", TakenEpoch(check), ", taken in etcd");
  return check.waiting_for;
}

std::string Duration(int64_t ms) { return base::FormatDuration(base::Duration(ms)); }

// Sets a condition false only if it exists, so healthy shares carry no noise.
void ClearCondition(ShareStatusRecord& status, const std::string& type, int64_t now) {
  if (FindCondition(status, type) != nullptr) SetCondition(status, type, false, "", "", now);
}

void SetPhase(ShareStatusRecord& status, v1::Phase phase, std::string reason) {
  status.set_phase(phase);
  status.set_reason(std::move(reason));
}

// Details, for condition messages (which may change on every pass).
std::string Describe(const ShareObservation& share) {
  if (!share.reachable) return absl::StrCat("unreachable: ", share.error);
  return absl::StrCat(sharemanager::v1::ShareState_Name(share.state), ": ", share.reason);
}

// For phase reasons: nothing that changes from pass to pass (an error text,
// a count of milliseconds), so that an unchanged share is not rewritten.
std::string Summary(const ShareObservation& share) {
  return share.reachable ? sharemanager::v1::ShareState_Name(share.state) : "unreachable";
}

// The share-manager's word counts only from the pod the record names and
// only if it is plausible: an answer for another epoch or volume (an old or
// foreign server on the endpoint), or one that claims a remount generation
// never requested, is no answer.
std::optional<ShareObservation> FromCurrentPod(const std::optional<ShareObservation>& share,
                                               const ShareRecord& record, uint64_t epoch) {
  if (!share || !share->reachable) return share;
  std::string wrong;
  if (share->epoch != epoch) {
    wrong = absl::StrCat("answered for epoch ", share->epoch, ", not ", epoch);
  } else if (share->volume != record.spec().volume()) {
    wrong = absl::StrCat("answered for volume ", share->volume, ", not ", record.spec().volume());
  } else if (share->handled_generation > record.status().remount_requested_generation()) {
    wrong = absl::StrCat("answered remount generation ", share->handled_generation,
                         ", above the requested ", record.status().remount_requested_generation());
  }
  if (wrong.empty()) return share;
  return ShareObservation{.error = std::move(wrong)};
}

// The pod a condemned status named: its replacement decision stands until
// the pod is gone, whatever it answers meanwhile (a failed Delete must not
// turn an ERROR share back into STARTING and stop the retries).
bool Condemned(const ShareRecord& record, const ShareStatusRecord& st, const Pod* pod) {
  return record.status().phase() == v1::ERROR && pod != nullptr &&
         record.status().epoch() == st.epoch() && record.status().pod() == pod->name;
}

}  // namespace

int64_t BackoffMs(uint32_t failures, int64_t initial_ms, int64_t max_ms) {
  if (failures == 0) return 0;
  int64_t backoff = initial_ms;
  for (uint32_t i = 1; i < failures && backoff < max_ms; ++i) backoff *= 2;
  return std::min(backoff, max_ms);
}

void ShareMarks::ForEpoch(uint64_t e) {
  if (epoch == e) return;
  ShareMarks fresh;
  fresh.volume = std::move(volume);
  fresh.last_replacement = last_replacement;
  fresh.deletes = std::move(deletes);
  fresh.epoch = e;
  *this = std::move(fresh);
}

ShareStatusRecord ComputeStatus(const ShareRecord& record, const Observation& observed, Now now,
                                ShareMarks& marks, const ReconcilerOptions& options) {
  ShareStatusRecord st = record.status();
  st.set_observed_spec_generation(record.spec_generation());
  if (st.epoch() == 0) st.set_epoch(1);
  if (observed.epoch > st.epoch()) {
    // A pod of a later epoch exists (a record restored from an older copy, a
    // lost write): epochs only move forward, so the record catches up, and
    // the next replacement goes above it.
    st.set_epoch(observed.epoch);
    st.set_pod("");
  }
  marks.ForEpoch(st.epoch());
  const Pod* pod = observed.current;
  st.set_endpoint(pod != nullptr ? pod->endpoint : "");
  if (pod != nullptr && st.pod().empty()) {
    st.set_pod(pod->name);  // created by a call whose answer was lost: adopt it
    st.set_pod_created_unix_ms(now.wall_ms);
  }
  // After a restart the pod's age is unknown: it counts from now.
  if (pod != nullptr && !marks.pod_seen) marks.pod_seen = observed.started.mono_ms;
  const std::optional<ShareObservation> answered =
      FromCurrentPod(observed.share, record, st.epoch());
  // A repair claim is honoured only while the peer answers; a frozen or gone
  // share-manager's last word is not kept.
  const RepairObservation* repair =
      answered && answered->reachable && answered->repair ? &*answered->repair : nullptr;
  if (repair != nullptr) {
    SetCondition(st, condition::kRepairing, true, "Repairing", repair->what, now.wall_ms);
  } else if (FindCondition(st, condition::kRepairing) != nullptr) {
    if (SetCondition(st, condition::kRepairing, false,
                     answered && answered->reachable ? "Finished" : "NotReported", "",
                     now.wall_ms)) {
      marks.repair_ended = now.mono_ms;
    }
  }

  if (!ShouldServe(record)) {
    ClearCondition(st, condition::kRollingOut, now.wall_ms);
    const bool none = pod == nullptr && observed.stale.empty();
    SetPhase(st, none ? v1::STOPPED : v1::STOPPING,
             none ? (record.deletion_requested() ? "deleted" : "not served")
                  : "deleting share-manager pods");
    return st;
  }
  if (pod == nullptr) {
    if (st.pod().empty()) {
      SetPhase(st, v1::PENDING, absl::StrCat("creating a pod for epoch ", st.epoch()));
    } else {
      SetPhase(st, v1::ERROR, absl::StrCat("pod ", st.pod(), " is gone"));
      SetCondition(st, condition::kPodReady, false, "PodGone", st.reason(), now.wall_ms);
    }
    return st;
  }
  const bool condemned = Condemned(record, st, pod);
  auto keep_condemned = [&] {
    if (condemned) SetPhase(st, v1::ERROR, record.status().reason());
  };
  if (pod->phase == PodPhase::kPending) {
    SetPhase(st, v1::STARTING, absl::StrCat("pod ", pod->name, " is pending"));
    SetCondition(st, condition::kPodReady, false, "Pending", "", now.wall_ms);
    keep_condemned();
    return st;
  }
  if (IsDead(pod->phase)) {
    SetPhase(st, v1::ERROR,
             absl::StrCat("pod ", pod->name, " ", PodPhaseName(pod->phase), " with exit code ",
                          pod->exit_code, pod->termination_message.empty() ? "" : ": ",
                          pod->termination_message));
    SetCondition(st, condition::kPodReady, false, std::string(PodPhaseName(pod->phase)),
                 st.reason(), now.wall_ms);
    keep_condemned();
    return st;
  }

  if (pod->terminating) {
    // Deleted by someone else (kubectl, a drain): it serves until it stops,
    // and only then may its replacement start.
    SetPhase(st, v1::ERROR,
             absl::StrCat("pod ", pod->name,
                          " is being deleted: its replacement is made once it is gone"));
    SetCondition(st, condition::kPodReady, false, "Terminating", st.reason(), now.wall_ms);
    keep_condemned();
    return st;
  }

  // Running (or Unknown): the share-manager's own word decides.
  SetCondition(st, condition::kPodReady, pod->phase == PodPhase::kRunning,
               std::string(PodPhaseName(pod->phase)), "", now.wall_ms);
  const ShareObservation share = answered.value_or(
      ShareObservation{.error = absl::StrCat("pod phase ", PodPhaseName(pod->phase))});
  const bool serving = share.reachable && share.state == sharemanager::v1::SERVING;
  SetCondition(st, condition::kHealthy, serving, serving ? "Serving" : "NotServing",
               serving ? "" : Describe(share), observed.started.wall_ms);
  if (serving) {
    marks.unhealthy_since.reset();
    if (!marks.serving_since) marks.serving_since = observed.started.mono_ms;
  } else {
    marks.serving_since.reset();
    if (!marks.unhealthy_since) marks.unhealthy_since = observed.started.mono_ms;
  }
  if (share.reachable) {
    st.set_remount_acknowledged_generation(
        std::max(st.remount_acknowledged_generation(), share.handled_generation));
    // A request is an edge: only the flip to read-only creates one.
    if (SetCondition(st, condition::kReadOnly, share.read_only,
                     share.read_only ? "ReadOnlyFilesystem" : "Writable", "", now.wall_ms) &&
        share.read_only) {
      st.set_remount_requested_generation(SaturatingIncrement(
          std::max(st.remount_requested_generation(), st.remount_acknowledged_generation())));
      st.set_remount_requested_unix_ms(now.wall_ms);
    }
  }
  const bool read_only = share.reachable && share.read_only && repair == nullptr;
  if (!read_only) {
    marks.read_only_since.reset();
  } else if (!marks.read_only_since) {
    marks.read_only_since = observed.started.mono_ms;
  }

  if (share.reachable && share.state == sharemanager::v1::FAILED) {
    SetPhase(st, v1::ERROR, absl::StrCat("share-manager FAILED: ", share.reason));
  } else if (repair != nullptr && repair->elapsed_ms > options.repair_budget_ms) {
    SetPhase(st, v1::ERROR,
             absl::StrCat("repair exceeded the repair budget of ",
                          Duration(options.repair_budget_ms), ": ", repair->what));
  } else if (repair != nullptr) {
    // No elapsed time here: the record is rewritten when the repair changes,
    // not on every pass while it runs.
    SetPhase(st, v1::REPAIRING, absl::StrCat("repairing: ", repair->what));
  } else if (read_only && marks.remounts >= options.max_remounts) {
    SetPhase(st, v1::ERROR,
             absl::StrCat("export read-only again after ", marks.remounts, " remounts"));
  } else if (read_only && now.mono_ms - *marks.read_only_since >= options.readonly_budget_ms) {
    SetPhase(st, v1::ERROR,
             absl::StrCat("export read-only beyond the read-only budget of ",
                          Duration(options.readonly_budget_ms)));
  } else if (read_only) {
    // A read-only export is repaired by a remount, not by a new pod.
    SetPhase(st, v1::RUNNING, "export read-only; remount requested");
  } else if (serving && observed.roll_out) {
    // Replaced as a failed pod is, but not counted as a failure (no backoff):
    // the next epoch is recorded before this pod is deleted, and its pod is
    // made once this one is gone, so two never serve at once.
    const std::string reason = absl::StrCat("rolling out a new pod template: pod ", pod->name,
                                            " replaced by epoch ", SaturatingIncrement(st.epoch()));
    SetCondition(st, condition::kRollingOut, true, "TemplateChanged", reason, now.wall_ms);
    st.set_epoch(SaturatingIncrement(st.epoch()));
    st.set_pod("");
    st.set_endpoint("");
    marks.ForEpoch(st.epoch());
    SetPhase(st, v1::PENDING, reason);
    return st;
  } else if (serving) {
    SetPhase(st, v1::RUNNING, "serving");
    if (!pod->outdated) ClearCondition(st, condition::kRollingOut, now.wall_ms);
    if (!marks.last_replacement) marks.last_replacement = now.mono_ms;
    if (now.mono_ms - *marks.last_replacement >= options.stable_ms) st.set_replacements(0);
    if (now.mono_ms - *marks.serving_since >= options.stable_ms) marks.remounts = 0;
  } else {
    const v1::Phase before = record.status().phase();
    // Right after a repair, a share-manager still STARTING was in its
    // start-up check and gets the start timeout; any other had served.
    const bool served_before = before == v1::RUNNING || (before == v1::REPAIRING &&
                                                         share.state != sharemanager::v1::STARTING);
    const int64_t grace = served_before ? options.unhealthy_grace_ms : options.start_timeout_ms;
    const int64_t since =
        std::max({*marks.unhealthy_since, *marks.pod_seen, marks.repair_ended.value_or(0)});
    if (now.mono_ms - since >= grace) {
      SetPhase(st, v1::ERROR,
               absl::StrCat(served_before ? "not serving beyond the unhealthy grace of "
                                          : "not serving within the start timeout of ",
                            Duration(grace), ": ", Summary(share)));
    } else {
      SetPhase(
          st, served_before ? v1::RUNNING : v1::STARTING,
          absl::StrCat(served_before ? "unhealthy, within grace: " : "starting: ", Summary(share)));
    }
  }
  keep_condemned();
  return st;
}

Reconciler::Reconciler(Store& store, PodRuntime& runtime, ShareConnector& connector,
                       const WallClock& wall, const MonotonicClock& mono, ReconcilerOptions options,
                       ControllerHooks hooks)
    : store_(store),
      runtime_(runtime),
      connector_(connector),
      wall_(wall),
      mono_(mono),
      options_(options),
      hooks_(std::move(hooks)) {}

ShareMarks& Reconciler::MarksFor(const std::string& name) {
  absl::MutexLock lock(&marks_mu_);
  return marks_[name];
}

absl::Status Reconciler::Persist(ShareRecord& record, const ShareStatusRecord& status) {
  // Condition messages carry details that may differ on every pass (an
  // error's text); alone they are not worth a write, which would wake every
  // watcher of the store, this controller included.
  if (!SameIgnoringMessages(record.status(), status)) {
    ShareRecord next = record;
    *next.mutable_status() = status;
    auto stored = store_.Update(next);
    if (!stored.ok()) {
      if (IsConflict(stored.status()) && hooks_.store_conflict) hooks_.store_conflict();
      return stored.status();
    }
    const bool moved =
        record.status().phase() != status.phase() || record.status().reason() != status.reason();
    record = *std::move(stored);
    if (moved && hooks_.transition) hooks_.transition(record.name(), status);
  }
  if (hooks_.phase) hooks_.phase(record.name(), status.phase());
  return absl::OkStatus();
}

int64_t Reconciler::ReplaceBackoff(const ShareStatusRecord& status) const {
  return BackoffMs(status.replacements(), options_.replace_backoff_initial_ms,
                   options_.replace_backoff_max_ms);
}

Reconciler::Deletion Reconciler::DeletePods(const std::vector<const Pod*>& pods, ShareMarks& marks,
                                            int64_t now) {
  Deletion out;
  std::map<std::string, RetryMark> kept;  // marks of pods no longer listed go
  for (const Pod* pod : pods) {
    RetryMark mark = marks.deletes[pod->name];
    if (pod->terminating) {
      // Its deletion is under way (a grace period): nothing to ask, nothing
      // failed; the runtime's pod-change wake-up says when it is gone.
      mark = {.failures = 0, .next_ms = now + options_.resync_ms};
    } else if (now >= mark.next_ms) {
      if (auto s = runtime_.Delete(pod->name); s.ok()) {
        // Deletion may take a while (a grace period): ask again only after a
        // resync if the pod is still listed then.
        mark = {.failures = 0, .next_ms = now + options_.resync_ms};
      } else {
        mark.failures++;
        mark.next_ms = now + BackoffMs(mark.failures, options_.retry_backoff_initial_ms,
                                       options_.retry_backoff_max_ms);
        out.error = std::string(s.message());
      }
    }
    out.failing = out.failing || mark.failures > 0;
    const int64_t wait = std::max<int64_t>(mark.next_ms - now, 0);
    out.wait_ms = out.wait_ms < 0 ? wait : std::min(out.wait_ms, wait);
    kept[pod->name] = mark;
  }
  marks.deletes = std::move(kept);
  return out;
}

bool Reconciler::ClaimRollout(const std::string& name) {
  absl::MutexLock lock(&rollout_mu_);
  if (!rolling_.empty() && rolling_ != name) return false;
  auto records = store_.List();
  if (!records.ok()) return false;  // the next pass asks again
  for (const ShareRecord& other : *records) {
    if (other.name() != name && ConditionTrue(other.status(), condition::kRollingOut)) {
      // Its own passes release it: until then nobody scans again.
      rolling_ = other.name();
      return false;
    }
  }
  rolling_ = name;
  return true;
}

void Reconciler::ReleaseRollout(const std::string& name) {
  absl::MutexLock lock(&rollout_mu_);
  if (rolling_ == name) rolling_.clear();
}

PassResult Reconciler::RemovePods(const std::string& name) {
  if (hooks_.removed) hooks_.removed(name);
  ReleaseRollout(name);
  std::string volume = name;  // shares are named after their volume
  {
    absl::MutexLock lock(&marks_mu_);
    if (auto it = marks_.find(name); it != marks_.end() && !it->second.volume.empty()) {
      volume = it->second.volume;
    }
  }
  auto pods = runtime_.List(volume);
  if (!pods.ok()) return {.error = pods.status()};
  if (pods->empty()) {
    absl::MutexLock lock(&marks_mu_);
    marks_.erase(name);
    return {};
  }
  std::vector<const Pod*> all;
  for (const Pod& pod : *pods) all.push_back(&pod);
  const Deletion deleted = DeletePods(all, MarksFor(name), mono_.MonotonicMs());
  return {.requeue_after_ms = deleted.wait_ms,
          .error = deleted.error.empty() ? absl::OkStatus() : absl::UnavailableError(deleted.error),
          .backing_off = deleted.failing};
}

PassResult Reconciler::Reconcile(const std::string& name) {
  auto got = store_.Get(name);
  if (!got.ok()) {
    if (got.status().code() == absl::StatusCode::kNotFound) return RemovePods(name);
    return {.requeue_after_ms = std::nullopt, .error = got.status()};
  }
  ShareRecord record = *std::move(got);
  ShareMarks& marks = MarksFor(name);
  marks.volume = record.spec().volume();
  const Now started = NowBoth();

  // Observe.
  auto pods = runtime_.List(record.spec().volume());
  if (!pods.ok()) {
    ShareStatusRecord st = record.status();
    SetCondition(st, condition::kRuntimeUnavailable, true, "ListFailed",
                 std::string(pods.status().message()), started.wall_ms);
    const auto persisted = Persist(record, st);
    return {.requeue_after_ms = std::nullopt, .error = persisted.ok() ? pods.status() : persisted};
  }
  uint64_t epoch = std::max<uint64_t>(record.status().epoch(), 1);
  for (const Pod& pod : *pods) epoch = std::max(epoch, pod.epoch);
  Observation observed{.epoch = epoch, .started = started};
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
  observed.roll_out = observed.current != nullptr && observed.current->outdated &&
                      ShouldServe(record) && ClaimRollout(name);
  const Now now = NowBoth();

  // Compute and record, before any action.
  ShareStatusRecord st = ComputeStatus(record, observed, now, marks, options_);
  const auto answer = FromCurrentPod(observed.share, record, st.epoch());
  const bool answered = answer && answer->reachable;
  ClearCondition(st, condition::kRuntimeUnavailable, now.wall_ms);
  // Held before any pod is created (this write comes first), released only
  // once no pod is listed and none will be made: a store whose deletes wait
  // lets the record go then, and never while a pod may still hold the device.
  // A record being deleted can no longer be held anew (Kubernetes refuses a
  // finalizer added then); it is only let go.
  const bool may_hold = record.status().hold_record() || !record.deletion_requested();
  st.set_hold_record(may_hold && (ShouldServe(record) || !pods->empty()));
  if (auto s = Persist(record, st); !s.ok()) {
    // A claim no record shows would hold every other share back unseen.
    if (!ConditionTrue(record.status(), condition::kRollingOut)) ReleaseRollout(name);
    return {.requeue_after_ms = std::nullopt, .error = s};
  }
  // Recorded done (or never begun): the next share may roll out.
  if (!ConditionTrue(st, condition::kRollingOut)) ReleaseRollout(name);

  // Act. Fence first: pods of other epochs go, whatever else happens.
  const Pod* current = observed.current;
  const bool replace = current != nullptr && (st.phase() == v1::ERROR || !ShouldServe(record) ||
                                              current->epoch != st.epoch());
  std::vector<const Pod*> doomed = observed.stale;
  if (replace) doomed.push_back(current);
  const Deletion deleted = DeletePods(doomed, marks, now.mono_ms);
  if (deleted.failing || FindCondition(st, condition::kPodDeleteFailed) != nullptr) {
    const Condition* before = FindCondition(st, condition::kPodDeleteFailed);
    // Between retries the last failure's message stays.
    const std::string message = !deleted.error.empty() || !deleted.failing || before == nullptr
                                    ? deleted.error
                                    : before->message();
    SetCondition(st, condition::kPodDeleteFailed, deleted.failing, "DeleteFailed", message,
                 now.wall_ms);
    if (auto s = Persist(record, st); !s.ok())
      return {.requeue_after_ms = std::nullopt, .error = s};
  }
  if (!deleted.error.empty()) {
    return {.requeue_after_ms = deleted.wait_ms,
            .error = absl::UnavailableError(deleted.error),
            .backing_off = true};
  }
  if (deleted.failing) return {.requeue_after_ms = deleted.wait_ms, .backing_off = true};
  if (!ShouldServe(record)) {
    return {.requeue_after_ms = st.phase() == v1::STOPPED
                                    ? std::nullopt
                                    : std::optional<int64_t>(options_.resync_ms)};
  }
  if (!doomed.empty()) {
    // The replacement is created once their deletions are observed: at once
    // if the runtime tells, or when a lingering pod is asked again.
    return {.requeue_after_ms = std::min(deleted.wait_ms, options_.resync_ms)};
  }
  if (current == nullptr) return CreatePod(record, st, marks, now);
  return Remount(record, st, *current, answered, marks, now);
}

// One request per read-only event; the gate requeues, never drops. Nothing
// that touches the device goes to a repairing share: the request waits for
// the repair's end (the resync requeues it) and its delay.
PassResult Reconciler::Remount(ShareRecord& record, ShareStatusRecord& st, const Pod& current,
                               bool answered, ShareMarks& marks, Now now) {
  const PassResult resync{.requeue_after_ms = options_.resync_ms};
  if (!answered || st.phase() == v1::REPAIRING ||
      st.remount_requested_generation() <= st.remount_acknowledged_generation()) {
    return resync;
  }
  if (marks.remount_generation != st.remount_requested_generation()) {
    // Made in this pass, or before a restart or on another epoch's pod: the
    // delay counts from now, on this process's monotonic clock.
    marks.remount_generation = st.remount_requested_generation();
    marks.remount_requested = now.mono_ms;
  }
  const int64_t due =
      std::max({marks.remount_requested + options_.remount_delay_ms,
                marks.repair_ended.value_or(0) + options_.remount_delay_ms, marks.mount.next_ms});
  if (now.mono_ms < due) {
    return {.requeue_after_ms = std::min(due - now.mono_ms, options_.resync_ms),
            .backing_off = marks.mount.failures > 0};
  }
  auto handled = connector_.Mount(current, st.epoch(), st.remount_requested_generation());
  if (handled.ok() && *handled > st.remount_requested_generation()) {
    handled = absl::InternalError(absl::StrCat("Mount answered generation ", *handled,
                                               ", above the requested ",
                                               st.remount_requested_generation()));
  }
  PassResult result = resync;
  if (handled.ok()) {
    st.set_remount_acknowledged_generation(
        std::max(st.remount_acknowledged_generation(), *handled));
    ClearCondition(st, condition::kMountFailed, now.wall_ms);
    marks.mount = {};
    marks.remounts++;
  } else {
    SetCondition(st, condition::kMountFailed, true, "MountFailed",
                 std::string(handled.status().message()), now.wall_ms);
    marks.mount.failures++;
    const int64_t backoff = BackoffMs(marks.mount.failures, options_.retry_backoff_initial_ms,
                                      options_.retry_backoff_max_ms);
    marks.mount.next_ms = now.mono_ms + backoff;
    result = {.requeue_after_ms = backoff, .error = handled.status(), .backing_off = true};
  }
  if (auto s = Persist(record, st); !s.ok()) return {.requeue_after_ms = std::nullopt, .error = s};
  return result;
}

PassResult Reconciler::CreatePod(ShareRecord& record, ShareStatusRecord st, ShareMarks& marks,
                                 Now now) {
  if (!st.pod().empty()) {
    // The epoch's pod is gone: fence it by moving to the next epoch, recorded
    // before the new pod exists, so nothing can act for the old one again.
    // The backoff counts on the monotonic clock; after a restart, from now.
    if (!marks.last_replacement) marks.last_replacement = now.mono_ms;
    const int64_t wait = *marks.last_replacement + ReplaceBackoff(st) - now.mono_ms;
    if (st.replacements() > 0 && wait > 0) return {.requeue_after_ms = wait};
    st.set_epoch(SaturatingIncrement(st.epoch()));
    st.set_pod("");
    st.set_endpoint("");
    st.set_replacements(st.replacements() + 1);
    st.set_last_replacement_unix_ms(now.wall_ms);
    marks.last_replacement = now.mono_ms;
    marks.ForEpoch(st.epoch());
    ClearCondition(st, condition::kEpochAdvanced, now.wall_ms);  // an epoch of our own
    SetPhase(st, v1::PENDING, absl::StrCat("replacing the pod with epoch ", st.epoch()));
    if (auto s = Persist(record, st); !s.ok())
      return {.requeue_after_ms = std::nullopt, .error = s};
    if (hooks_.replaced) hooks_.replaced();
  }
  // The previous pod may still hold its serving lease: the new one waits,
  // its epoch recorded already.
  auto start = runtime_.CheckStart(record.spec(), st.epoch());
  if (!start.ok()) return {.requeue_after_ms = std::nullopt, .error = start.status()};
  if (const uint64_t above = SaturatingIncrement(TakenEpoch(*start));
      above > st.epoch() && MayMoveAbove(*start, st.epoch())) {
    // An epoch at or above ours is taken in etcd: a pod of ours would be
    // refused the lease, and so would each next epoch up to it. Move above
    // it at once, recorded before the pod exists, then ask again.
    SetCondition(st, condition::kEpochAdvanced, true, "RecordedByOther",
                 absl::StrCat("epoch ", st.epoch(), " is not above epoch ", TakenEpoch(*start),
                              " taken in etcd: moved to epoch ", above),
                 now.wall_ms);
    st.set_epoch(above);
    marks.ForEpoch(st.epoch());
    SetPhase(st, v1::PENDING, absl::StrCat("creating a pod for epoch ", st.epoch()));
    if (auto s = Persist(record, st); !s.ok())
      return {.requeue_after_ms = std::nullopt, .error = s};
    start = runtime_.CheckStart(record.spec(), st.epoch());
    if (!start.ok()) return {.requeue_after_ms = std::nullopt, .error = start.status()};
  }
  // Taken again since (or the epochs ran out): the next pass moves on.
  const bool taken = TakenEpoch(*start) >= st.epoch();
  if (!start->ready || taken) {
    SetCondition(st, condition::kWaitingToStart, true, "Waiting", WaitingFor(*start, st.epoch()),
                 now.wall_ms);
    if (auto s = Persist(record, st); !s.ok())
      return {.requeue_after_ms = std::nullopt, .error = s};
    return {.requeue_after_ms = std::min(start->retry_after_ms, options_.resync_ms)};
  }
  ClearCondition(st, condition::kWaitingToStart, now.wall_ms);
  auto pod = runtime_.Create(record.spec(), st.epoch());
  if (!pod.ok()) {
    SetCondition(st, condition::kPodCreateFailed, true, "CreateFailed",
                 std::string(pod.status().message()), now.wall_ms);
    const auto s = Persist(record, st);
    return {.requeue_after_ms = std::nullopt, .error = s.ok() ? pod.status() : s};
  }
  marks.pod_seen = now.mono_ms;
  st.set_pod(pod->name);
  st.set_endpoint(pod->endpoint);
  st.set_pod_created_unix_ms(now.wall_ms);
  SetPhase(st, v1::STARTING, absl::StrCat("created pod ", pod->name));
  ClearCondition(st, condition::kPodCreateFailed, now.wall_ms);
  if (auto s = Persist(record, st); !s.ok()) return {.requeue_after_ms = std::nullopt, .error = s};
  return {.requeue_after_ms = options_.resync_ms};
}

}  // namespace controller
