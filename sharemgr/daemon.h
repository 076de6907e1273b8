// `share-manager daemon`: the Daemon owns every part (event loop, status
// board, volume owner, share, supervisor, volume monitor, gRPC servers) with
// explicit lifetimes: members are declared in the order they may be used by
// the ones after them, so destruction never leaves a thread or a callback
// pointing at something gone.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "metrics/endpoint.h"
#include "sharemgr/capped_listener.h"
#include "sharemgr/daemon_config.h"
#include "sharemgr/export_probe.h"
#include "sharemgr/health_check_only_service.h"
#include "sharemgr/health_publisher.h"
#include "sharemgr/lease_fencer.h"
#include "sharemgr/longhorn_service.h"
#include "sharemgr/metrics.h"
#include "sharemgr/serving_lease.h"
#include "sharemgr/share.h"
#include "sharemgr/share_service.h"
#include "sharemgr/status_board.h"
#include "sharemgr/volume.h"
#include "sharemgr/volume_monitor.h"
#include "sharemgr/volume_owner.h"
#include "supervisor/event_loop.h"
#include "supervisor/supervisor.h"

namespace sharemgr {

class Daemon {
 public:
  explicit Daemon(const DaemonConfig& config);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Runs until stopped or failed; the exit code.
  int Run();
  // After Run: an operation on the device (or a probe) was still stuck in the
  // kernel when the stop budget ran out. Its thread cannot be joined, so the
  // process must exit without destroying the Daemon.
  bool stuck() const { return stuck_; }

 private:
  // Loop thread unless said otherwise.
  absl::Status StartGrpc();
  absl::Status StartHealthServer();
  // The metrics listener (--metrics-listen), before anything else listens.
  absl::Status StartMetrics();
  // Prepares the volume (if any) and starts ganesha: at once without a
  // serving lease, once it is taken with one.
  void BeginServing();
  void OnLeaseTaken();
  // Fences when valid_until has passed; else re-arms lease_timer_ for it. On
  // the loop: when serving is to start, at each renewal the keeper
  // confirms, at valid_until.
  void CheckLease();
  // The new valid_until to the fencer; a fencer that cannot be told fences
  // (posted to the loop). Keeper thread: it takes and renews the lease, and
  // tells the fencer itself, so that a stalled loop cannot keep a renewal
  // from it (the fencer would kill a ganesha whose lease is valid).
  void ExtendFencer(base::TimePoint valid_until);
  // The keeper lost the lease (or could not take it): the fencer's validity
  // ends now, and the loop fences. Keeper thread.
  void OnLeaseLost(const std::string& why);
  // Whether serving may start or go on now: always without a lease; with
  // one, only while it is valid. An expired lease is fenced here (a lost one
  // by the keeper's hook, already posted).
  bool LeaseAllowsServing();
  // The lease is lost: ganesha SIGKILLed, the volume no longer touched (every
  // operation refused, unmounted at once), the export withdrawn, FAILED, exit 6.
  void FenceLease(const std::string& why);
  // A new ganesha, held at its start gate: the fencer kills it at
  // valid_until unless told otherwise. An error (the fencer not told, or the
  // lease over meanwhile) fences (posted), and the ganesha never runs.
  absl::Status ArmFencer(const supervisor::ChildProcess& ganesha);
  void OnVolumePrepared(const absl::Status& status);
  void StartGanesha();
  void OnSupervisorStatus(const supervisor::SupervisorStatus& status);
  // Everything the share and its volume contribute to the status (any thread).
  void FillShare(sharemanager::v1::ShareStatus& status) const;
  // ganesha's last usage sample, when it is of the ganesha `status` names (any thread).
  void FillUsage(sharemanager::v1::ShareStatus& status) const ABSL_LOCKS_EXCLUDED(usage_mu_);
  void PublishShare();
  ShareCommands Commands();
  // Stops the gRPC server off the loop thread: Shutdown blocks while RPCs drain.
  void BeginServerStop();
  int Shutdown();

  const DaemonConfig& config_;
  // With --metrics-listen only. Every part below may call it, so it is
  // destroyed last, just after its endpoint (whose threads scrape it).
  std::unique_ptr<ShareMetrics> metrics_;
  std::unique_ptr<metrics::Endpoint> metrics_endpoint_;
  supervisor::EventLoop loop_;
  base::SteadyTimeSource clock_;
  StatusBoard board_;
  ExportProbe export_probe_;
  Share share_;
  std::optional<Volume> volume_;
  // Device thread; posts to loop_ and reads volume_.
  std::optional<VolumeOwner> owner_;
  std::optional<supervisor::Supervisor> sup_;
  // ganesha's last usage sample: written on the loop, read by RPC threads
  // when they send a status (samples are not status changes).
  mutable absl::Mutex usage_mu_;
  std::optional<supervisor::ChildUsage> usage_ ABSL_GUARDED_BY(usage_mu_);
  std::optional<VolumeMonitor> monitor_;  // loop thread
  // The same monitor for gRPC threads (its usage figures are atomics).
  std::atomic<const VolumeMonitor*> monitor_for_rpcs_{nullptr};
  ShareService service_;
  LonghornService longhorn_;
  std::unique_ptr<grpc::Server> server_;
  // health_server_'s only service.
  HealthCheckOnlyService health_port_service_;
  std::unique_ptr<grpc::Server> health_server_;  // null without --health-listen
  // Feeds health_server_; stopped before it shuts down.
  std::unique_ptr<CappedListener> health_listener_;
  std::optional<HealthPublisher> health_;
  std::thread server_stopper_;
  // The serving lease (--lease-etcd): its store, the fencer process, which
  // kills ganesha at valid_until even when this process cannot run, its
  // keeper (whose thread posts to loop_ and extends fencer_, which therefore
  // outlives it), the loop's own timer at valid_until, which fences even
  // while the keeper waits on a store call. All on CLOCK_BOOTTIME: a suspend
  // does not stretch the lease.
  const base::TimeSource& lease_clock_ = base::BootClock();
  std::unique_ptr<LeaseBackend> lease_backend_;
  // Armed and stopped on the loop, extended by the keeper's thread (its own
  // mutex); set before the keeper starts, never reset before it is joined.
  std::unique_ptr<LeaseFencer> fencer_;
  std::optional<ServingLease> lease_;
  std::optional<supervisor::Timer> lease_timer_;
  bool lease_lost_ = false;
  bool volume_failed_ = false;
  bool stuck_ = false;
};

int RunDaemon(const DaemonConfig& config);

}  // namespace sharemgr
