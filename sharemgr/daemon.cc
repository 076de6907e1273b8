#include "sharemgr/daemon.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <optional>
#include <thread>

#include "base/files.h"
#include "base/fmt_absl.h"
#include "sharemgr/exit_codes.h"
#include "sharemgr/health_publisher.h"
#include "sharemgr/longhorn_service.h"
#include "sharemgr/share.h"
#include "sharemgr/share_service.h"
#include "sharemgr/status_board.h"
#include "sharemgr/volume.h"
#include "sharemgr/volume_monitor.h"
#include "supervisor/nfs_null_probe.h"

namespace sharemgr {
namespace {

namespace v1 = sharemanager::v1;
using supervisor::State;

// The loop wakes every 200 ms; this much silence means it is stuck.
constexpr base::Duration kLoopStallLimit{3000};
// In-flight RPCs get this long to finish once stopping starts.
constexpr auto kRpcDrainTime = std::chrono::seconds(1);

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
  if (s.last_exit) {
    auto* exit = out.mutable_last_exit();
    exit->set_present(true);
    exit->set_code(s.last_exit->code);
    exit->set_signal(s.last_exit->signal);
    exit->set_unix_ms(UnixMs(s.last_exit_at));
    exit->set_description(s.last_exit_description);
  }
}

// The supervisor's probe (on its worker thread), remembering what the export
// LOOKUP said for readiness (read on the loop thread).
class ExportProbe {
 public:
  ExportProbe(std::string host, uint16_t port, std::string component)
      : host_(std::move(host)), port_(port), component_(std::move(component)) {}

  absl::Status Probe(base::Duration timeout) {
    if (auto null = supervisor::ProbeNfsNull(host_, port_, timeout); !null.ok()) return null;
    auto lookup = supervisor::ProbeNfsExport(host_, port_, component_, timeout);
    if (!lookup.ok() && lookup.code() != absl::StatusCode::kNotFound) return lookup;  // a miss
    std::lock_guard lock(mu_);
    last_ = lookup;
    return absl::OkStatus();
  }
  absl::Status last() const {
    std::lock_guard lock(mu_);
    return last_;
  }

 private:
  const std::string host_;
  const uint16_t port_;
  const std::string component_;
  mutable std::mutex mu_;
  absl::Status last_;
};

// Stops the gRPC server off the loop thread: Shutdown blocks while RPCs drain.
class ServerStopper {
 public:
  explicit ServerStopper(grpc::Server& server, StatusBoard& board)
      : server_(server), board_(board) {}
  ~ServerStopper() { Join(); }
  void Begin() {
    if (thread_.joinable()) return;
    thread_ = std::thread([this] {
      board_.Close();
      server_.GetHealthCheckService()->Shutdown();
      server_.Shutdown(std::chrono::system_clock::now() + kRpcDrainTime);
    });
  }
  void Join() {
    Begin();
    thread_.join();
  }

 private:
  grpc::Server& server_;
  StatusBoard& board_;
  std::thread thread_;
};

}  // namespace

int RunDaemon(const DaemonConfig& config) {
  supervisor::BlockSupervisedSignals();
  supervisor::BecomeSubreaper();
  signal(SIGPIPE, SIG_IGN);

  const auto& export_dir = config.ganesha.input().export_dir;
  // State is private; the export's root belongs to the workload (never chmod it).
  for (const auto& [dir, mode, existing] :
       {std::tuple{config.state_dir, 0700u, base::ExistingMode::kEnforce},
        std::tuple{config.ganesha.input().recovery_root, 0700u, base::ExistingMode::kEnforce},
        std::tuple{export_dir, 0755u, base::ExistingMode::kKeep}}) {
    if (auto status = base::EnsureDirectory(dir, mode, existing); !status.ok()) {
      spdlog::error("{}", status.message());
      return kExitStartup;
    }
  }

  supervisor::EventLoop loop;
  base::SteadyTimeSource clock;
  std::optional<supervisor::Supervisor> sup;
  Share share(config.ganesha, config.config_path, [&sup] {
    sup->SignalChild(SIGHUP);
    sup->Reevaluate();
    sup->ProbeSoon();
  });
  if (auto status = share.WriteConfig(); !status.ok()) {
    spdlog::error("{}", status.message());
    return kExitStartup;
  }

  std::optional<Volume> volume;
  std::optional<VolumeMonitor> monitor;
  if (config.volume) volume.emplace(*config.volume);
  // Everything the share and its volume contribute to the status.
  auto fill_share = [&](v1::ShareStatus& s) {
    share.Fill(s);
    if (monitor) monitor->Fill(s);
  };

  StatusBoard board;
  board.Update([&](v1::ShareStatus& s) {
    s.set_state(v1::STARTING);
    s.set_reason(volume ? "preparing the volume" : "starting ganesha");
    s.set_epoch(config.epoch);
    s.set_started_unix_ms(UnixMs(std::chrono::system_clock::now()));
    fill_share(s);
  });

  ShareService service(
      board,
      ShareCommands{
          .post = [&loop](std::function<void()> task) { loop.Post(std::move(task)); },
          .mount =
              [&](uint64_t generation) {
                auto handled = share.Mount(generation);
                if (monitor) monitor->CheckNow();
                board.Update(fill_share);
                return handled;
              },
          .unmount =
              [&] {
                auto status = share.Unmount();
                board.Update(fill_share);
                return status;
              },
          .live_fields =
              [&](v1::ShareStatus& s) {
                if (monitor) monitor->FillUsage(s);
              },
          .trim = volume ? std::function<absl::StatusOr<uint64_t>()>([&] { return volume->Trim(); })
                         : nullptr,
          .resize = volume ? std::function<absl::StatusOr<ResizeResult>()>(
                                 [&] { return volume->Resize(); })
                           : nullptr,
          .release_volume = volume ? std::function<absl::Status()>([&] {
            monitor->SetReleased(true);
            return volume->Unmount(std::chrono::seconds(10));
          })
                                   : nullptr,
          .attach_volume = volume ? std::function<absl::Status()>([&] {
            if (!volume->ReadMountState().mounted) {
              if (auto status = volume->Mount(); !status.ok()) return status;
            }
            monitor->SetReleased(false);
            return absl::OkStatus();
          })
                                  : nullptr,
      },
      config.epoch);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // Without this a second share-manager could bind the same port and split traffic.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Let controllers keep watch streams alive with pings every 10 s or more.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  int port = 0;
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(), &port);
  if (!config.socket.empty()) {
    unlink(config.socket.c_str());  // a stale socket from a previous run
    builder.AddListeningPort("unix:" + config.socket, grpc::InsecureServerCredentials());
  }
  LonghornService longhorn(service);
  builder.RegisterService(&service);
  builder.RegisterService(&longhorn);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::error("cannot serve gRPC on {}{}{} (address in use or not local?)", config.listen,
                  config.socket.empty() ? "" : " and unix:", config.socket);
    return kExitStartup;
  }
  spdlog::info("gRPC listening on {}{}{}; volume {} epoch {}", config.listen,
               config.socket.empty() ? "" : " and unix:", config.socket,
               config.ganesha.input().volume, config.epoch);

  HealthPublisher health(
      *server->GetHealthCheckService(), [&loop] { return loop.last_tick(); }, kLoopStallLimit);
  ServerStopper stopper(*server, board);

  if (volume) {
    // Before ganesha: check and mount the device. gRPC already answers (STARTING).
    if (auto status = volume->Prepare(); !status.ok()) {
      spdlog::error("volume: {}", status.message());
      board.Update([&](v1::ShareStatus& s) {
        s.set_state(v1::FAILED);
        s.set_reason(std::string(status.message()));
      });
      health.OnState(State::kFailed);
      std::this_thread::sleep_for(config.supervisor.failed_linger);
      stopper.Join();
      return kExitVolume;
    }
    board.Update([&](v1::ShareStatus& s) { s.set_reason("starting ganesha"); });
  }

  // The probe: NULL proves ganesha answers (its misses mean "hung"); a LOOKUP
  // of the pseudo path proves the export loaded, which only readiness needs.
  ExportProbe export_probe(config.probe_host,
                           static_cast<uint16_t>(config.ganesha.input().nfs_port),
                           config.ganesha.input().volume);
  share.SetExportCheck([&export_probe] { return export_probe.last(); });
  sup.emplace(
      loop, config.supervisor,
      [&export_probe](base::Duration timeout) { return export_probe.Probe(timeout); },
      [&share] { return share.CheckReady(); }, clock);
  bool volume_failed = false;
  if (volume) {
    share.SetVolumeReady([&monitor] { return monitor->Ready(); });
    auto publish = [&] { board.Update(fill_share); };
    monitor.emplace(loop, *volume, config.volume_probe_interval,
                    VolumeHooks{
                        .changed =
                            [&, publish] {
                              sup->Reevaluate();
                              publish();
                            },
                        .withdraw_export = [&] { share.SetVolumeAvailable(false); },
                        .restore_export =
                            [&] {
                              share.CountRemount();
                              share.SetVolumeAvailable(true);
                            },
                        .repaired_in_place = [&] { share.CountRemount(); },
                        .give_up =
                            [&](const std::string& reason) {
                              volume_failed = true;
                              sup->Fail(reason);
                            },
                    });
  }
  sup->AddStatusObserver([&](const supervisor::SupervisorStatus& status) {
    board.Update([&](v1::ShareStatus& s) {
      FillSupervisorStatus(status, s);
      fill_share(s);
    });
    health.OnState(status.state);
    if (status.state == State::kStopping) stopper.Begin();
  });
  sup->Start();
  if (monitor) monitor->Start();
  loop.Run();

  stopper.Join();
  const auto outcome = sup->outcome();
  monitor.reset();
  sup.reset();  // ganesha is gone after this
  if (volume) {
    // Unmount only once ganesha no longer holds the export.
    if (auto status = volume->Unmount(std::chrono::seconds(10)); !status.ok()) {
      spdlog::error("{}", status.message());
    }
  }
  if (!config.socket.empty()) unlink(config.socket.c_str());
  if (volume_failed) {
    spdlog::error("exiting with code {}: {}", kExitVolume, board.Snapshot().reason());
    return kExitVolume;
  }
  if (outcome == supervisor::Outcome::kFailed) {
    spdlog::error("exiting with code {}: {}", kExitGaneshaFailed, board.Snapshot().reason());
    return kExitGaneshaFailed;
  }
  spdlog::info("stopped");
  return kExitStopped;
}

}  // namespace sharemgr
