// share-manager's Prometheus metrics (--metrics-listen; README "Metrics"):
// every family it exports, and the narrow hooks the daemon's parts call as
// things happen. What is cheap to read now and stale when stored (ganesha's
// /proc figures, the age of the state) is computed at scrape time; the
// rest is counted where it happens. Every method is thread-safe: the loop,
// the RPC threads and the scraping threads all reach it.
#pragma once

#include <grpcpp/support/status.h>
#include <sys/types.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "metrics/catalogue.h"
#include "sharemgr/volume.h"
#include "sharemgr/volume_monitor.h"
#include "supervisor/health_state.h"
#include "supervisor/supervisor.h"

namespace sharemgr {

enum class VolumeOp { kTrim, kResize };

class ShareMetrics {
 public:
  // `ganesha_memory_limit_bytes`: --ganesha-memory-limit (0: none), exported
  // beside ganesha's RSS so a dashboard can draw one against the other.
  explicit ShareMetrics(uint64_t ganesha_memory_limit_bytes = 0);
  ShareMetrics(const ShareMetrics&) = delete;
  ShareMetrics& operator=(const ShareMetrics&) = delete;

  // What a metrics::Endpoint serves. Its scraped families read this object:
  // stop the endpoint before this goes.
  std::shared_ptr<metrics::Catalogue> catalogue() const { return catalogue_; }

  // The share's state and ganesha's pid (0: none), on every published status.
  void OnStatus(supervisor::State state, pid_t ganesha_pid);

  // The supervisor's events, bound to the hooks below. `budget_left` is read
  // on the loop thread after each death and probe (Supervisor::DeathBudgetLeft).
  supervisor::SupervisorEvents SupervisorEvents(std::function<int()> budget_left);
  void OnDeath(const supervisor::Death& death);
  void OnProbe(base::Clock::duration took, bool answered);
  void OnMiss();
  void OnHangDetected(base::Clock::duration since_first_miss);
  void SetDeathBudgetLeft(int deaths);

  // The volume monitor's metric hooks, bound to the hooks below.
  void AddVolumeHooks(VolumeHooks& hooks);
  void OnVolumeUsage(const FsUsage& usage);
  void OnReadOnly();
  void OnRepair(RepairKind kind, RepairOutcome outcome, base::Clock::duration took);
  // A trim or resize call ended (its whole time, queueing included).
  void OnVolumeOp(VolumeOp op, bool ok, base::Clock::duration took);

  // One gRPC call answered (the interceptor, rpc_metrics.h).
  void OnRpc(const std::string& method, grpc::StatusCode code, base::Clock::duration took);

  // The `cause` label of a death: exit_<code>, signal_<n>, hang,
  // start_timeout, memory, spawn_failed.
  static std::string DeathCauseLabel(const supervisor::Death& death);

 private:
  static constexpr size_t kStateCount = 5;
  static constexpr std::array<supervisor::State, kStateCount> kStates = {
      supervisor::State::kStarting, supervisor::State::kServing, supervisor::State::kDegraded,
      supervisor::State::kFailed, supervisor::State::kStopping};

  std::shared_ptr<metrics::Catalogue> catalogue_;

  prometheus::Family<prometheus::Gauge>& state_;
  std::array<prometheus::Gauge*, kStateCount> state_gauges_{};  // as kStates
  prometheus::Counter& restarts_;
  prometheus::Family<prometheus::Counter>& deaths_;
  prometheus::Gauge& death_budget_left_;
  prometheus::Histogram& crash_detection_;
  prometheus::Histogram& crash_to_serving_;
  prometheus::Histogram& hang_detection_;
  prometheus::Histogram& probe_duration_;
  prometheus::Counter& probe_misses_;
  prometheus::Counter& read_only_flips_;
  prometheus::Family<prometheus::Counter>& repairs_;
  prometheus::Family<prometheus::Histogram>& repair_duration_;
  prometheus::Family<prometheus::Counter>& volume_ops_;
  prometheus::Family<prometheus::Histogram>& volume_op_duration_;
  prometheus::Family<prometheus::Counter>& rpc_calls_;
  prometheus::Family<prometheus::Histogram>& rpc_duration_;

  mutable absl::Mutex mu_;
  supervisor::State current_ ABSL_GUARDED_BY(mu_) = supervisor::State::kStarting;
  base::TimePoint last_transition_ ABSL_GUARDED_BY(mu_);
  // The first death of the recovery under way, until SERVING again.
  std::optional<base::TimePoint> recovering_since_ ABSL_GUARDED_BY(mu_);
  pid_t ganesha_pid_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<FsUsage> usage_ ABSL_GUARDED_BY(mu_);
  // By method: the histogram families would build (and drop) a new one on
  // every Add of an existing label set.
  std::map<std::string, prometheus::Histogram*> rpc_durations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sharemgr
