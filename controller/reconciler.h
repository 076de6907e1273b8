// One reconcile pass for one share: observe (pods, health with a deadline) ->
// compute the status -> persist it -> act (delete, create, remount). A remote
// call that fails becomes a condition or a phase, and never skips the status
// write: a dead or frozen peer cannot keep a share's status stale.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "controller/conditions.h"
#include "controller/pod_runtime.h"
#include "controller/share_connector.h"
#include "controller/store.h"
#include "controller/wall_clock.h"

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
};

struct PassResult {
  // Reconcile again after this long; nullopt: only when something changes.
  std::optional<int64_t> requeue_after_ms;
  // A failure the work queue should back off on (the store, the runtime).
  absl::Status error;
};

// What a pass saw, before acting: pure input to ComputeStatus.
struct Observation {
  const Pod* current = nullptr;           // the pod of the status' epoch
  std::vector<const Pod*> stale;          // pods of any other epoch
  std::optional<ShareObservation> share;  // when `current` runs
  // When the observation began: a peer that stayed unreachable for a whole
  // call deadline has been unhealthy since then, not since the call failed.
  int64_t started_ms = 0;
};

// The status a pass should persist for what it observed. Pure.
ShareStatusRecord ComputeStatus(const ShareRecord& record, const Observation& observed,
                                int64_t now_ms, const ReconcilerOptions& options);

class Reconciler {
 public:
  Reconciler(Store& store, PodRuntime& runtime, ShareConnector& connector, const WallClock& clock,
             ReconcilerOptions options = {});

  PassResult Reconcile(const std::string& name);

 private:
  // Writes record.status; on success record carries the new resource_version.
  absl::Status Persist(ShareRecord& record, const ShareStatusRecord& status);
  PassResult CreatePod(ShareRecord& record, ShareStatusRecord status, int64_t now);
  int64_t ReplaceBackoff(const ShareStatusRecord& status) const;

  Store& store_;
  PodRuntime& runtime_;
  ShareConnector& connector_;
  const WallClock& clock_;
  ReconcilerOptions options_;
};

}  // namespace controller
