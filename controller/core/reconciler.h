// One reconcile pass for one share: observe (pods, health with a deadline) ->
// compute the status -> persist it -> act (delete, create, remount). A remote
// call that fails becomes a condition or a phase, and never skips the status
// write: a dead or frozen peer cannot keep a share's status stale.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "controller/core/conditions.h"
#include "controller/core/controller_hooks.h"
#include "controller/core/wall_clock.h"
#include "controller/runtime/pod_runtime.h"
#include "controller/runtime/share_connector.h"
#include "controller/store/store.h"

namespace controller {

struct ReconcilerOptions {
  // A running pod that is unreachable or not SERVING this long is replaced.
  int64_t unhealthy_grace_ms = 2000;
  // A new pod may take this long to become SERVING.
  int64_t start_timeout_ms = 30'000;
  // Act on a remount request this long after it was made (the consumer's gate).
  int64_t remount_delay_ms = 5000;
  // Re-observe a share this often while it should be served.
  int64_t resync_ms = 1000;
  // Replacing a pod again soon after the last replacement backs off.
  int64_t replace_backoff_initial_ms = 1000;
  int64_t replace_backoff_max_ms = 120'000;
  // RUNNING this long ends a replacement streak.
  int64_t stable_ms = 60'000;
  // A pod that answers and reports a repair running no longer than this is
  // neither replaced nor sent a Mount: real filesystem checks take minutes,
  // and replacing the pod would kill the check it is waiting for.
  int64_t repair_budget_ms = 30 * 60'000;
  // A share that stays read-only after this many acknowledged Mounts (since
  // its last stable run), or for this long, is replaced: a remount that does
  // not help is not retried forever.
  uint32_t max_remounts = 3;
  int64_t readonly_budget_ms = 2 * 60'000;
  // A failed pod Delete or Mount is retried after this, doubling up to the max.
  int64_t retry_backoff_initial_ms = 200;
  int64_t retry_backoff_max_ms = 30'000;
};

// Exponential backoff for `failures` consecutive failures (0: none).
int64_t BackoffMs(uint32_t failures, int64_t initial_ms, int64_t max_ms);

// Retries of one kind of call: when the next attempt may go out.
struct RetryMark {
  uint32_t failures = 0;
  int64_t next_ms = 0;  // monotonic
};

// What the reconciler remembers of a share between passes, on the monotonic
// clock. In memory only: after a restart every absent mark is taken as "now"
// by the first pass that needs it, so a restart can lengthen a wait but never
// end one early, whatever the wall clock did meanwhile.
struct ShareMarks {
  std::string volume;  // for removing its pods once the record is gone
  // Across epochs.
  std::optional<int64_t> last_replacement;
  std::map<std::string, RetryMark> deletes;  // by pod name
  // Of `epoch` only: a new epoch starts them over.
  uint64_t epoch = 0;
  std::optional<int64_t> pod_seen;         // created, or first observed
  std::optional<int64_t> unhealthy_since;  // first observed not serving
  std::optional<int64_t> serving_since;    // first observed serving writable
  std::optional<int64_t> repair_ended;     // observed the Repairing condition end
  std::optional<int64_t> read_only_since;  // first observed read-only
  uint64_t remount_generation = 0;         // the request `remount_requested` belongs to
  int64_t remount_requested = 0;           // when this process first saw that request
  uint32_t remounts = 0;                   // acknowledged Mounts since a stable run
  RetryMark mount;

  // Starts the per-epoch marks over when the epoch changed.
  void ForEpoch(uint64_t e);
};

// "Now" on both clocks.
struct Now {
  int64_t wall_ms = 0;  // for persisted stamps only
  int64_t mono_ms = 0;  // for every duration
};

struct PassResult {
  // Reconcile again after this long; nullopt: only when something changes.
  std::optional<int64_t> requeue_after_ms;
  // A failure the work queue should back off on (the store, the runtime).
  absl::Status error;
  // A call is waiting out its retry backoff: the queue keeps the key's
  // backoff too, so that other wake-ups do not bypass it.
  bool backing_off = false;
};

// What a pass saw, before acting: pure input to ComputeStatus.
struct Observation {
  const Pod* current = nullptr;           // the pod of the status' epoch
  std::vector<const Pod*> stale;          // pods of any other epoch
  std::optional<ShareObservation> share;  // when `current` runs
  // `current` is outdated and this share holds the rollout (no other share
  // is rolling out): if it serves, it is replaced now.
  bool roll_out = false;
  // The highest epoch of any listed pod (epochs only move forward).
  uint64_t epoch = 0;
  // When the observation began: a peer that stayed unreachable for a whole
  // call deadline has been unhealthy since then, not since the call failed.
  Now started;
};

// The status a pass should persist for what it observed; updates the
// share's marks (and nothing else).
ShareStatusRecord ComputeStatus(const ShareRecord& record, const Observation& observed, Now now,
                                ShareMarks& marks, const ReconcilerOptions& options);

class Reconciler {
 public:
  // `hooks`: the phase, removed, replaced and store_conflict events.
  Reconciler(Store& store, PodRuntime& runtime, ShareConnector& connector, const WallClock& wall,
             const MonotonicClock& mono, ReconcilerOptions options = {},
             ControllerHooks hooks = {});

  PassResult Reconcile(const std::string& name);

 private:
  struct Deletion {
    std::string error;     // of a Delete that failed in this pass
    bool failing = false;  // some pod's Delete is failing (this pass or before)
    int64_t wait_ms = -1;  // until the next Delete may go out (-1: none waits)
  };
  Now NowBoth() const { return {wall_.NowMs(), mono_.MonotonicMs()}; }
  ShareMarks& MarksFor(const std::string& name);
  // Writes record.status unless only condition messages changed; on success
  // record carries the new resource_version.
  absl::Status Persist(ShareRecord& record, const ShareStatusRecord& status);
  // Deletes the pods, each no sooner than its retry mark allows.
  Deletion DeletePods(const std::vector<const Pod*>& pods, ShareMarks& marks, int64_t now);
  // The share's record is gone: its pods go too.
  PassResult RemovePods(const std::string& name);
  // `answered`: the current pod's share-manager answered, plausibly, in this pass.
  PassResult Remount(ShareRecord& record, ShareStatusRecord& st, const Pod& current, bool answered,
                     ShareMarks& marks, Now now);
  PassResult CreatePod(ShareRecord& record, ShareStatusRecord status, ShareMarks& marks, Now now);
  int64_t ReplaceBackoff(const ShareStatusRecord& status) const;
  // Whether `name` may begin replacing its outdated pod: no other share's
  // record says RollingOut (a rollout this process did not start survives
  // its restart there) and no other pass here has claimed it.
  bool ClaimRollout(const std::string& name);
  // Lets the next share roll out, if `name` held the claim.
  void ReleaseRollout(const std::string& name);

  Store& store_;
  PodRuntime& runtime_;
  ShareConnector& connector_;
  const WallClock& wall_;
  const MonotonicClock& mono_;
  ReconcilerOptions options_;
  const ControllerHooks hooks_;
  absl::Mutex marks_mu_;
  // By share name. A share is reconciled by one worker at a time, so an
  // entry is only ever used by one pass; the lock guards the map itself.
  std::map<std::string, ShareMarks> marks_ ABSL_GUARDED_BY(marks_mu_);
  // One share at a time rolls out a new pod template; held across the store
  // scan, so two workers never both find the way clear.
  absl::Mutex rollout_mu_;
  std::string rolling_ ABSL_GUARDED_BY(rollout_mu_);
};

}  // namespace controller
