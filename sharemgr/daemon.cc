#include "sharemgr/daemon.h"

#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/files.h"
#include "base/fmt_absl.h"
#include "base/open_file_limit.h"
#include "base/tls.h"
#include "sharemgr/etcd_lease_backend.h"
#include "sharemgr/exit_codes.h"
#include "sharemgr/rpc_metrics.h"
#include "sharemgr/termination_message.h"
#include "sharemgr/unix_socket.h"

namespace sharemgr {
namespace {

namespace v1 = sharemanager::v1;
using supervisor::State;

// In-flight RPCs get this long to finish once stopping starts.
constexpr auto kRpcDrainTime = std::chrono::seconds(1);
// gRPC server bounds (see StartGrpc).
constexpr int kMaxMessageBytes = 64 * 1024;
// An aged connection's calls get this long to finish (at most its age): a
// Mount or Unmount ends well within it; a WatchStatus stream is cut and its
// watcher opens another on a new connection.
constexpr base::Duration kMaxConnectionAgeGrace{std::chrono::minutes(1)};
// The server pings an idle peer this often and gives up on it after the
// timeout: a controller gone without a FIN costs its connection for under a minute.
constexpr int kKeepaliveTimeMs = 30'000;
constexpr int kKeepaliveTimeoutMs = 10'000;
constexpr int kMaxStreamsPerConnection = 128;
constexpr int kThreadsForQuickCalls = 16;
// The health port answers probes only (kubelet: one Check per connection), so
// anything more is someone else's: a few threads, one call at a time per
// connection, a few connections (the oldest closed for a new one), and none
// that stays: closed after 30 s without a call, or 5 minutes whatever it does.
constexpr int kHealthPortThreads = 4;
constexpr size_t kHealthPortMaxConnections = 32;
constexpr int kHealthPortStreamsPerConnection = 1;
constexpr int kHealthPortIdleMs = 30'000;
constexpr int kHealthPortMaxAgeMs = 5 * 60'000;
constexpr int kHealthPortMaxAgeGraceMs = 10'000;
// A volume probe in flight at stop gets this long to return.
constexpr base::Duration kProbeDrainTime{2000};
// The fencer gets this long to exit once its channel is closed.
constexpr base::Duration kFencerStopTime{2000};

v1::ShareState ToProto(State state) {
  switch (state) {
    case State::kStarting:
      return v1::STARTING;
    case State::kServing:
      return v1::SERVING;
    case State::kDegraded:
      return v1::DEGRADED;
    case State::kFailed:
      return v1::FAILED;
    case State::kStopping:
      return v1::STOPPING;
  }
  return v1::SHARE_STATE_UNSPECIFIED;
}

// Runs a trim or resize for a caller, timed for the metrics (when on).
template <typename Run>
auto TimedVolumeOp(ShareMetrics* metrics, VolumeOp op, Run run) {
  const base::TimePoint start = base::Clock::now();
  auto result = run();
  if (metrics != nullptr) metrics->OnVolumeOp(op, result.ok(), base::Clock::now() - start);
  return result;
}

v1::VolumeState ToProto(VolumeState state) {
  switch (state) {
    case VolumeState::kPreparing:
      return v1::VOLUME_PREPARING;
    case VolumeState::kMounted:
      return v1::VOLUME_MOUNTED;
    case VolumeState::kReleased:
      return v1::VOLUME_RELEASED;
    case VolumeState::kRepairing:
      return v1::VOLUME_REPAIRING;
    case VolumeState::kFailed:
      return v1::VOLUME_FAILED;
    case VolumeState::kStopping:
      return v1::VOLUME_STOPPING;
  }
  return v1::VOLUME_STATE_UNSPECIFIED;
}

v1::DeathCause ToProto(supervisor::DeathCause cause) {
  switch (cause) {
    case supervisor::DeathCause::kExited:
      return v1::DEATH_EXITED;
    case supervisor::DeathCause::kSignaled:
      return v1::DEATH_SIGNAL;
    case supervisor::DeathCause::kHung:
      return v1::DEATH_HUNG;
    case supervisor::DeathCause::kStartTimeout:
      return v1::DEATH_START_TIMEOUT;
    case supervisor::DeathCause::kMemory:
      return v1::DEATH_MEMORY;
    case supervisor::DeathCause::kSpawnFailed:
      return v1::DEATH_SPAWN_FAILED;
    case supervisor::DeathCause::kStopped:
      return v1::DEATH_STOPPED;
  }
  return v1::DEATH_CAUSE_UNSPECIFIED;
}

int64_t UnixMs(std::chrono::system_clock::time_point t) {
  if (t.time_since_epoch().count() == 0) return 0;
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

void FillSupervisorStatus(const supervisor::SupervisorStatus& s, v1::ShareStatus& out) {
  out.set_state(ToProto(s.state));
  out.set_reason(s.reason);
  out.set_last_transition_unix_ms(UnixMs(s.last_transition));
  out.set_ganesha_pid(s.pid);
  out.set_ganesha_started_unix_ms(s.pid != 0 ? UnixMs(s.child_started) : 0);
  out.set_restart_count(s.restarts);
  out.set_memory_kills(s.memory_kills);
  if (s.last_exit) {
    auto* exit = out.mutable_last_exit();
    exit->set_present(true);
    exit->set_code(s.last_exit->code);
    exit->set_signal(s.last_exit->signal);
    exit->set_unix_ms(UnixMs(s.last_exit_at));
    exit->set_description(s.last_exit_description);
    exit->set_cause(ToProto(s.last_exit_cause));
  }
}

void FillVolume(const VolumeSnapshot& volume, v1::ShareStatus& out) {
  out.set_volume_state(ToProto(volume.state));
  if (!volume.repair) {
    out.clear_repair();
    return;
  }
  auto* repair = out.mutable_repair();
  repair->set_what(volume.repair->what);
  repair->set_started_unix_ms(UnixMs(volume.repair->started_wall));
  repair->set_full_repairs_in_window(static_cast<uint32_t>(volume.repair->full_repairs_in_window));
  repair->set_max_full_repairs(static_cast<uint32_t>(volume.repair->max_full_repairs));
}

}  // namespace

Daemon::Daemon(const DaemonConfig& config)
    : config_(config),
      metrics_(config.metrics_listen.empty()
                   ? nullptr
                   : std::make_unique<ShareMetrics>(config.supervisor.memory_limit_bytes)),
      export_probe_(config.probe_host, static_cast<uint16_t>(config.ganesha.input().nfs_port),
                    config.ganesha.input().volume,
                    config.volume ? "" : config.ganesha.input().export_dir),
      share_(config.ganesha, config.config_path,
             [this] {
               sup_->Reload();
               sup_->Reevaluate();
               sup_->ProbeSoon();
             }),
      service_(board_, Commands(), config.limits),
      longhorn_(service_) {
  if (config.volume) {
    volume_.emplace(*config.volume);
    // Device thread -> loop: every state or repair change is published there.
    owner_.emplace(
        *volume_, config.volume_owner, [this] { loop_.Post([this] { PublishShare(); }); },
        // Asked on the device thread before every job that writes the device
        // (prepare, Mount, trim, resize, repairs): nothing of the volume is
        // touched under a lease that ended, even with the loop stalled.
        // ValidAt is thread-safe, and lease_ is set in Run before any job is
        // queued; the loop's lease_lost_ is not read here.
        [this]() -> absl::Status {
          if (!lease_ || lease_->ValidAt(lease_clock_.Now())) return absl::OkStatus();
          return absl::FailedPreconditionError(
              "the serving lease is no longer valid; the volume is not touched");
        });
  }
}

Daemon::~Daemon() {
  if (server_stopper_.joinable()) server_stopper_.join();
}

ShareCommands Daemon::Commands() {
  ShareCommands commands{
      .post = [this](std::function<void()> task) { loop_.Post(std::move(task)); },
      .mount =
          [this](uint64_t generation) {
            auto handled = share_.Mount(generation);
            PublishShare();
            return handled;
          },
      .unmount =
          [this] {
            auto status = share_.Unmount();
            PublishShare();
            return status;
          },
      .live_fields =
          [this](v1::ShareStatus& s) {
            if (const VolumeMonitor* monitor = monitor_for_rpcs_.load()) monitor->FillUsage(s);
            if (owner_ && s.has_repair()) {
              if (auto repair = owner_->Snapshot().repair) {
                s.mutable_repair()->set_elapsed_ms(
                    static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              base::Clock::now() - repair->started)
                                              .count()));
              }
            }
            FillUsage(s);
            if (lease_ && s.lease().held()) {
              const auto until = lease_->valid_until();
              const auto now = lease_clock_.Now();
              s.mutable_lease()->set_valid_for_ms(
                  until && *until > now
                      ? static_cast<uint64_t>(
                            std::chrono::duration_cast<std::chrono::milliseconds>(*until - now)
                                .count())
                      : 0);
            }
          },
  };
  if (!config_.volume) {
    // A directory share: Mount creates the directory when it is missing (on
    // the RPC's thread, never the loop's), and leaves an existing one alone.
    commands.attach_volume = [dir = config_.ganesha.input().export_dir](ShareCommands::Deadline) {
      return base::EnsureDirectory(dir, 0755, base::ExistingMode::kKeep);
    };
    return commands;
  }
  commands.attach_volume = [this](ShareCommands::Deadline d) { return owner_->Attach(d); };
  commands.can_release_volume = [this] { return owner_->CanRelease(); };
  commands.release_volume = [this](ShareCommands::Deadline d) { return owner_->Release(d); };
  commands.trim = [this](ShareCommands::Deadline d) {
    return TimedVolumeOp(metrics_.get(), VolumeOp::kTrim, [&] { return owner_->Trim(d); });
  };
  commands.resize = [this](ShareCommands::Deadline d) {
    return TimedVolumeOp(metrics_.get(), VolumeOp::kResize, [&] { return owner_->Resize(d); });
  };
  return commands;
}

void Daemon::FillUsage(v1::ShareStatus& s) const {
  absl::MutexLock lock(&usage_mu_);
  // Only a sample of the ganesha the status names: none of one that exited.
  if (!usage_ || s.ganesha_pid() == 0 || usage_->pid != s.ganesha_pid()) {
    s.clear_ganesha_usage();
    return;
  }
  auto* usage = s.mutable_ganesha_usage();
  usage->set_rss_bytes(usage_->usage.rss_bytes);
  usage->set_memory_limit_bytes(config_.supervisor.memory_limit_bytes);
  usage->set_samples_over_limit(static_cast<uint32_t>(usage_->samples_over_limit));
  usage->set_samples_allowed(static_cast<uint32_t>(config_.supervisor.memory_limit_samples));
  usage->set_cpu_seconds(usage_->usage.cpu_seconds);
  usage->set_threads(usage_->usage.threads);
  usage->set_open_fds(usage_->usage.open_fds);
}

void Daemon::FillShare(v1::ShareStatus& s) const {
  share_.Fill(s);
  if (owner_) {
    FillVolume(owner_->Snapshot(), s);
  } else {
    s.set_volume_state(v1::VOLUME_NONE);
    s.set_read_only(export_probe_.directory_read_only());
  }
  if (monitor_) monitor_->Fill(s);
  if (config_.lease) {
    s.mutable_lease()->set_key(LeaseKey(*config_.lease));
    s.mutable_lease()->set_held(lease_ && !lease_lost_ && lease_->valid_until().has_value());
  }
}

void Daemon::PublishShare() {
  if (monitor_) monitor_->CheckNow();
  if (sup_) sup_->Reevaluate();
  board_.Update([this](v1::ShareStatus& s) { FillShare(s); });
}

absl::Status Daemon::StartGrpc() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // Without this a second share-manager could bind the same port and split traffic.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Let controllers keep watch streams alive with pings every 10 s or more;
  // the server pings idle peers too (PERMIT_WITHOUT_CALLS covers both).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  // A TLS connection is admitted once, at its handshake, with the CA of that
  // moment: a rotated CA (the files are re-read every --tls-refresh-interval)
  // is only used by new ones. Every connection therefore ends after
  // max_connection_age (GOAWAY, then the grace); its client reconnects and
  // shakes hands with what is in force now.
  const auto age = config_.max_connection_age;
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, static_cast<int>(age.count()));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             static_cast<int>(std::min(age, kMaxConnectionAgeGrace).count()));
  int port = 0;
  // With TLS the port speaks nothing else: the plaintext way in is the unix
  // socket (its mode guards it) and, for health only, the health port.
  builder.AddListeningPort(
      config_.listen,
      config_.tls ? base::TlsServerCredentials(*config_.tls, config_.tls_allowed_clients)
                  : grpc::InsecureServerCredentials(),
      &port);
  if (!config_.socket.empty()) {
    if (auto status = PrepareSocketPath(config_.socket); !status.ok()) return status;
    builder.AddListeningPort("unix:" + config_.socket, grpc::InsecureServerCredentials());
  }
  // Requests are a few bytes; status answers a few hundred.
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxStreamsPerConnection);
  // Every call that can last (streams, changes) is capped by the service, which
  // refuses the excess at once; these threads are what stays for reads and
  // health answers, so a flood of either cap never starves them.
  grpc::ResourceQuota quota("share-manager");
  quota.SetMaxThreads(config_.limits.max_watch_streams + config_.limits.max_changes +
                      kThreadsForQuickCalls);
  builder.SetResourceQuota(quota);
  if (metrics_) {
    // Every call on --listen and --socket, whatever its service; the health
    // port's probes are not counted.
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> counting;
    counting.push_back(std::make_unique<RpcMetricsInterceptorFactory>(
        ServiceMethods(
            {"sharemanager.v1.ShareManager", "ShareManagerService", "grpc.health.v1.Health"}),
        [metrics = metrics_.get()](const std::string& method, grpc::StatusCode code,
                                   base::Clock::duration took) {
          metrics->OnRpc(method, code, took);
        }));
    builder.experimental().SetInterceptorCreators(std::move(counting));
  }
  builder.RegisterService(&service_);
  if (config_.longhorn_compat) {
    builder.RegisterService(&longhorn_);
    spdlog::warn(
        "--longhorn-compat: Longhorn's ShareManagerService is served; its calls carry no epoch "
        "and are not fenced");
  }
  {
    // The socket is born owner-only: no moment where others may connect before
    // RestrictSocket. (umask is per process; anything else created meanwhile
    // just starts out stricter.)
    const mode_t old_umask = umask(0177);
    server_ = builder.BuildAndStart();
    umask(old_umask);
  }
  if (!server_ || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve gRPC on ", config_.listen,
                                               config_.socket.empty() ? "" : " and unix:",
                                               config_.socket, " (address in use or not local?)"));
  }
  // A start that fails past this point leaves no server and no socket behind.
  auto abandon = [this](absl::Status status) {
    server_->Shutdown();
    server_.reset();
    if (!config_.socket.empty()) unlink(config_.socket.c_str());
    return status;
  };
  if (!config_.socket.empty()) {
    if (auto status = RestrictSocket(config_.socket, config_.socket_group); !status.ok()) {
      return abandon(status);
    }
  }
  spdlog::info("gRPC listening on {}{}{}{}, connections renewed every {}; volume {} epoch {}",
               config_.listen,
               config_.tls ? absl::StrCat(" (mutual TLS, ", config_.tls_allowed_clients.size(),
                                          " allowed client name(s))")
                           : " (plaintext)",
               config_.socket.empty() ? "" : " and unix:", config_.socket,
               base::FormatDuration(age), config_.ganesha.input().volume, config_.limits.epoch);
  std::vector<grpc::HealthCheckServiceInterface*> health = {server_->GetHealthCheckService()};
  if (!config_.health_listen.empty()) {
    if (auto status = StartHealthServer(); !status.ok()) return abandon(status);
    health.push_back(&health_port_service_);
  }
  health_.emplace(
      std::move(health), [this] { return loop_.last_tick(); }, config_.loop_stall_limit);
  return absl::OkStatus();
}

// kubelet's gRPC probes speak plaintext only: this server answers them and
// nothing else. Its only service is HealthCheckOnlyService (Check; Watch is
// refused): gRPC's default health service, which would serve Watch streams,
// is left out, and any other call is UNIMPLEMENTED. Its connections come from
// a CappedListener, not from a gRPC port (see capped_listener.h for why).
absl::Status Daemon::StartHealthServer() {
  auto listener =
      CappedListener::Bind(config_.health_listen, {.max_connections = kHealthPortMaxConnections});
  if (!listener.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot serve health checks on --health-listen ",
                                               config_.health_listen, ": ",
                                               listener.status().message()));
  }
  grpc::ServerBuilder builder;
  builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
  builder.RegisterService(&health_port_service_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kHealthPortStreamsPerConnection);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, kHealthPortIdleMs);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, kHealthPortMaxAgeMs);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, kHealthPortMaxAgeGraceMs);
  grpc::ResourceQuota quota("share-manager-health");
  quota.SetMaxThreads(kHealthPortThreads);
  builder.SetResourceQuota(quota);
  health_server_ = builder.BuildAndStart();
  if (!health_server_) {
    return absl::UnavailableError("cannot start the health check server");
  }
  health_listener_ = std::move(*listener);
  health_listener_->Start(health_server_.get());
  spdlog::info("health checks (plaintext, grpc.health.v1 Check only) on {}, at most {} connections",
               config_.health_listen, kHealthPortMaxConnections);
  return absl::OkStatus();
}

absl::Status Daemon::StartMetrics() {
  if (!metrics_) return absl::OkStatus();
  auto endpoint = metrics::Endpoint::Start(config_.metrics_listen, metrics_->catalogue());
  if (!endpoint.ok()) {
    return absl::UnavailableError(absl::StrCat("--metrics-listen: ", endpoint.status().message()));
  }
  metrics_endpoint_ = *std::move(endpoint);
  spdlog::info("metrics (Prometheus text, plain HTTP) on http://{}{}", config_.metrics_listen,
               metrics::kMetricsPath);
  return absl::OkStatus();
}

void Daemon::BeginServerStop() {
  if (server_stopper_.joinable() || !server_) return;
  server_stopper_ = std::thread([this] {
    board_.Close();
    server_->GetHealthCheckService()->Shutdown();
    if (health_server_) health_port_service_.Shutdown();
    if (health_listener_) health_listener_->Stop();
    const auto drained = std::chrono::system_clock::now() + kRpcDrainTime;
    server_->Shutdown(drained);
    if (health_server_) health_server_->Shutdown(drained);
  });
}

void Daemon::OnSupervisorStatus(const supervisor::SupervisorStatus& status) {
  if (metrics_) metrics_->OnStatus(status.state, status.pid);
  board_.Update([&](v1::ShareStatus& s) {
    FillSupervisorStatus(status, s);
    FillShare(s);
  });
  health_->OnState(status.state);
  if (status.state == State::kStopping) {
    // Answer waiting volume callers and ask a running check to stop (SIGTERM)
    // while ganesha stops; the device is released once ganesha is gone.
    if (owner_) owner_->BeginStop();
    BeginServerStop();
  }
}

void Daemon::OnVolumePrepared(const absl::Status& status) {
  // Interrupted by a stop: an orderly end, not a volume failure.
  if (owner_->Snapshot().state == VolumeState::kStopping) return;
  // The lease may have ended while the volume was prepared (or the prepare
  // was called off for it): fenced, ganesha never started.
  if (!LeaseAllowsServing()) return;
  if (!status.ok()) {
    spdlog::error("volume: {}", status.message());
    volume_failed_ = true;
    sup_->Fail(std::string(status.message()));
    return;
  }
  VolumeHooks hooks{
      .changed = [this] { PublishShare(); },
      .withdraw_export = [this] { share_.SetVolumeAvailable(false); },
      .restore_export =
          [this](bool repaired) {
            if (repaired) share_.CountRemount();
            share_.SetVolumeAvailable(true);
          },
      .repaired_in_place = [this] { share_.CountRemount(); },
      .give_up =
          [this](const std::string& reason) {
            volume_failed_ = true;
            sup_->Fail(reason);
          },
  };
  if (metrics_) metrics_->AddVolumeHooks(hooks);
  monitor_.emplace(loop_, *owner_, *config_.volume, config_.volume_probe_interval,
                   std::move(hooks));
  monitor_for_rpcs_ = &*monitor_;
  share_.SetVolumeReady([this] { return monitor_->Ready(); });
  StartGanesha();
  monitor_->Start();
}

void Daemon::BeginServing() {
  if (owner_) {
    // Signals are handled from here on: a SIGTERM during the device wait or
    // the start-up check stops it cleanly (the check gets SIGTERM, never SIGKILL).
    sup_->Hold("preparing the volume");
    // The lease is checked again on the device thread when the prepare is
    // about to start (the owner's MayTouch).
    owner_->Prepare([this](absl::Status status) {
      loop_.Post([this, status = std::move(status)] { OnVolumePrepared(status); });
    });
  } else {
    StartGanesha();
  }
}

void Daemon::OnLeaseTaken() {
  // Stopped or failed while the lease was being taken: nothing to serve.
  if (lease_lost_ || sup_->outcome() || sup_->status().state != State::kStarting) return;
  // The keeper's word came through the loop's queue, which may have been
  // slow (a stalled loop, a blocked log): it may have ended meanwhile.
  if (!LeaseAllowsServing()) return;
  PublishShare();
  BeginServing();
}

bool Daemon::LeaseAllowsServing() {
  if (!lease_) return true;
  CheckLease();
  return !lease_lost_ && lease_->ValidAt(lease_clock_.Now());
}

void Daemon::CheckLease() {
  if (lease_lost_) return;
  const auto until = lease_->valid_until();
  // Not held: the keeper lost it, and its hook (posted already) fences with the reason.
  if (!until) return;
  const auto now = lease_clock_.Now();
  if (now >= *until) {
    FenceLease(absl::StrCat("no renewal confirmed within ",
                            base::FormatDuration(config_.lease->options.ttl -
                                                 LeaseFenceMargin(config_.lease->options.ttl)),
                            " of the last one sent (TTL minus the fence margin)"));
    return;
  }
  // Each renewal the keeper confirms comes back here (its renewed hook).
  lease_timer_->ArmAt(*until);
}

void Daemon::ExtendFencer(base::TimePoint valid_until) {
  if (auto told = fencer_->Extend(valid_until); !told.ok()) {
    loop_.Post([this, why = std::string(told.message())] { FenceLease(why); });
  }
}

void Daemon::OnLeaseLost(const std::string& why) {
  // The fencer first, from this thread: the validity is over now, not at the
  // valid_until it last heard (up to 2/3 TTL away), so it kills an armed
  // ganesha at once, and any later one as it is armed, even while the loop
  // that fences stalls. Told of nothing (stopped, gone), the fence still runs.
  auto told = fencer_->Extend(base::TimePoint{});
  loop_.Post(
      [this, why = told.ok() ? why : absl::StrCat(why, "; ", told.message())] { FenceLease(why); });
}

void Daemon::FenceLease(const std::string& why) {
  if (lease_lost_) return;
  lease_lost_ = true;
  lease_timer_->Disarm();
  const std::string reason = absl::StrCat("lease lost: ", why);
  // ganesha first: it must stop answering NFS now, before any file I/O here.
  sup_->Fail(reason, supervisor::Supervisor::StopSignal::kKill);
  // Then the volume: no operation on it any more (a running check is asked
  // to stop), no more repairs, and unmounted as soon as ganesha is gone, not
  // after the linger. (Dirty pages the kernel still writes back are beyond
  // this process: storage-level fencing covers them, see docs/DESIGN-NOTES.md "Serving lease".)
  if (monitor_) monitor_->Stop();
  if (owner_) owner_->Fence(reason);
  share_.Fence(reason);
  PublishShare();
}

absl::Status Daemon::ArmFencer(const supervisor::ChildProcess& ganesha) {
  // Until the last valid_until the keeper told it (none: at once).
  auto armed = fencer_->Arm(ganesha);
  // valid_until was checked by the spawn gate, but this process may have
  // stalled since (between the fork and now): then the lease may be over,
  // and ganesha must not run even until the fencer's kill lands.
  if (armed.ok() && !lease_->ValidAt(lease_clock_.Now())) {
    armed = absl::FailedPreconditionError(absl::StrCat(
        "the serving lease's validity ended before ganesha pid ", ganesha.pid(), " could start"));
  }
  if (armed.ok()) return armed;
  // Not from inside the supervisor's spawn: FenceLease fails the supervisor.
  loop_.Post([this, why = std::string(armed.message())] { FenceLease(why); });
  return armed;
}

void Daemon::StartGanesha() {
  sup_->Start();
  PublishShare();
}

int Daemon::Run() {
  const auto& export_dir = config_.ganesha.input().export_dir;
  // State is private; the export's root belongs to the workload (never chmod it).
  for (const auto& [dir, mode, existing] :
       {std::tuple{config_.state_dir, 0700u, base::ExistingMode::kEnforce},
        std::tuple{config_.ganesha.input().recovery_root, 0700u, base::ExistingMode::kEnforce},
        std::tuple{export_dir, 0755u, base::ExistingMode::kKeep}}) {
    if (auto status = base::EnsureDirectory(dir, mode, existing); !status.ok()) {
      spdlog::error("{}", status.message());
      return kExitStartup;
    }
  }
  if (auto status = share_.WriteConfig(); !status.ok()) {
    spdlog::error("{}", status.message());
    return kExitStartup;
  }
  const std::string waiting_for_lease =
      config_.lease ? absl::StrCat("waiting for the serving lease of epoch ", config_.limits.epoch)
                    : "";
  if (config_.lease) {
    auto backend = MakeEtcdLeaseBackend(*config_.lease, lease_clock_);
    if (!backend.ok()) {
      spdlog::error("--lease-etcd: {}", backend.status().message());
      return kExitBadInput;
    }
    lease_backend_ = *std::move(backend);
    // This executable again (also when the file was replaced meanwhile),
    // tagged with the state dir so that it is told apart in a process list.
    auto fencer = LeaseFencer::Start(
        loop_, {"/proc/self/exe", kLeaseFencerCommand, config_.state_dir},
        [this](const std::string& why) {
          FenceLease(
              absl::StrCat(why, "; without it nothing stops ganesha if share-manager stalls"));
        });
    if (!fencer.ok()) {
      spdlog::error("{}", fencer.status().message());
      return kExitStartup;
    }
    fencer_ = *std::move(fencer);
    lease_timer_.emplace(
        loop_, [this] { CheckLease(); }, CLOCK_BOOTTIME);
    // The keeper's thread hands everything to the loop, but for what the
    // fencer must hear even while the loop stalls: each renewal, and the end.
    lease_.emplace(*lease_backend_, lease_clock_, config_.lease->options,
                   ServingLease::Hooks{
                       .taken =
                           [this] {
                             // The fencer knows the validity before any ganesha is armed.
                             if (const auto until = lease_->valid_until()) ExtendFencer(*until);
                             loop_.Post([this] { OnLeaseTaken(); });
                           },
                       .lost = [this](const std::string& why) { OnLeaseLost(why); },
                       // The new valid_until to the fencer from this thread, to the
                       // lease timer through the loop.
                       .renewed =
                           [this](base::TimePoint valid_until) {
                             ExtendFencer(valid_until);
                             loop_.Post([this] { CheckLease(); });
                           },
                   });
  }
  board_.Update([&](v1::ShareStatus& s) {
    s.set_state(v1::STARTING);
    s.set_reason(config_.lease ? waiting_for_lease
                 : owner_      ? "preparing the volume"
                               : "starting ganesha");
    s.set_epoch(config_.limits.epoch);
    s.set_pod_uid(config_.pod_uid);
    s.set_started_unix_ms(UnixMs(std::chrono::system_clock::now()));
    FillShare(s);
  });
  if (auto status = StartMetrics(); !status.ok()) {
    spdlog::error("{}", status.message());
    return kExitStartup;
  }
  if (auto status = StartGrpc(); !status.ok()) {
    spdlog::error("{}", status.message());
    return kExitStartup;
  }

  share_.SetExportCheck([this] { return export_probe_.export_status(); });
  if (!owner_) share_.SetVolumeReady([this] { return export_probe_.directory_status(); });
  sup_.emplace(
      loop_, config_.supervisor,
      [this](base::Duration timeout) { return export_probe_.Probe(timeout); },
      [this] { return share_.CheckReady(); }, clock_);
  sup_->AddStatusObserver([this](const supervisor::SupervisorStatus& s) { OnSupervisorStatus(s); });
  if (metrics_) {
    sup_->SetEvents(metrics_->SupervisorEvents([this] { return sup_->DeathBudgetLeft(); }));
    metrics_->SetDeathBudgetLeft(sup_->DeathBudgetLeft());
  }
  sup_->AddUsageObserver([this](const supervisor::ChildUsage& usage) {
    absl::MutexLock lock(&usage_mu_);
    usage_ = usage;
  });
  if (lease_) {
    // Every ganesha (the first, each restart) starts only under a valid
    // lease, and runs nothing before the fencer guards it (it waits at its
    // start gate until armed).
    sup_->SetSpawnHooks({
        .may_spawn = [this] { return LeaseAllowsServing(); },
        .spawned = [this](const supervisor::ChildProcess& ganesha) { return ArmFencer(ganesha); },
    });
    // Nothing of the volume is touched (no fsck, no mount) before the lease
    // is held: an older holder may still be using it. A SIGTERM meanwhile
    // stops the wait.
    sup_->Hold(waiting_for_lease);
    lease_->Start();
  } else {
    BeginServing();
  }
  loop_.Run();
  return Shutdown();
}

int Daemon::Shutdown() {
  // Callers waiting for a volume operation are answered before the server
  // drains (also when the share FAILED, which skips STOPPING).
  if (owner_) owner_->BeginStop();
  BeginServerStop();
  if (server_stopper_.joinable()) server_stopper_.join();
  const auto outcome = sup_->outcome();
  if (monitor_ && !monitor_->WaitIdle(kProbeDrainTime)) {
    spdlog::error("a volume probe is stuck in the kernel; exiting without waiting for it");
    stuck_ = true;
  }
  if (!stuck_) {
    monitor_for_rpcs_ = nullptr;  // the server is shut down: no RPC reads it any more
    monitor_.reset();
  }
  sup_.reset();  // ganesha is gone after this
  // Its guard too, now: nothing left for it to kill. (The keeper may still
  // extend it: refused, and the fence that posts is never run.)
  if (fencer_) {
    if (auto exit = fencer_->Stop(kFencerStopTime); !exit.ok()) {
      spdlog::error("lease fencer: {}", exit.status().message());
    }
  }
  // Only now, with ganesha gone, may the device be released: the owner stops
  // what runs (a check gets SIGTERM and is waited for), then unmounts.
  if (owner_ && !owner_->Stop(config_.supervisor.stop_timeout)) stuck_ = true;
  if (!config_.socket.empty()) unlink(config_.socket.c_str());
  // The lease last, once nothing of the volume is in use here: revoked, so
  // the replacement need not wait out the TTL. A device stuck in the kernel
  // may still be mounted: then the lease just expires.
  if (lease_) {
    lease_->Stop(stuck_ ? ServingLease::StopMode::kLetExpire : ServingLease::StopMode::kRevoke)
        .IgnoreError();
  }
  if (lease_lost_) {
    spdlog::error("exiting with code {}: {}", kExitLeaseLost, board_.Snapshot().reason());
    ProcessLastErrorSink()->Pin();
    return kExitLeaseLost;
  }
  if (volume_failed_) {
    spdlog::error("exiting with code {}: {}", kExitVolume, board_.Snapshot().reason());
    ProcessLastErrorSink()->Pin();
    return kExitVolume;
  }
  if (outcome == supervisor::Outcome::kFailed) {
    spdlog::error("exiting with code {}: {}", kExitGaneshaFailed, board_.Snapshot().reason());
    ProcessLastErrorSink()->Pin();
    return kExitGaneshaFailed;
  }
  spdlog::info("stopped");
  return kExitStopped;
}

int RunDaemon(const DaemonConfig& config) {
  // Before any thread starts (the Daemon starts the device thread): every
  // thread inherits the mask, so SIGTERM reaches only the loop's signalfd.
  supervisor::BlockSupervisedSignals();
  supervisor::BecomeSubreaper();
  signal(SIGPIPE, SIG_IGN);
  // Every connection and every NFS probe costs a descriptor: take all the
  // kernel allows, so a flood of connections runs into it later.
  if (auto limit = base::RaiseOpenFileLimit(); limit.ok()) {
    spdlog::info("open file limit: {} (RLIMIT_NOFILE, soft raised to hard)", limit->soft);
  } else {
    spdlog::warn("open file limit unchanged: {}", limit.status().message());
  }
  auto daemon = std::make_unique<Daemon>(config);
  const int code = daemon->Run();
  if (daemon->stuck()) {
    // A thread is inside a system call that does not return; destroying what
    // it uses would be a use after free, and joining it would hang. The
    // kernel ends it with the process.
    spdlog::error("exiting with code {} while a filesystem call is stuck in the kernel", code);
    // main's write never runs on this path: kubelet's message is written here.
    if (code != kExitStopped) WriteTerminationMessage(ProcessLastErrorSink()->last_error());
    spdlog::shutdown();
    _exit(code);
  }
  daemon.reset();  // joins the device thread: the volume is unmounted after this
  return code;
}

}  // namespace sharemgr
