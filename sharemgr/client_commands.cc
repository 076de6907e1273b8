#include "sharemgr/client_commands.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/byte_size.h"
#include "base/clock.h"
#include "base/validate.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "sharemanager/v1/sharemanager.grpc.pb.h"
#include "sharemgr/exit_codes.h"

namespace sharemgr {
namespace {

namespace v1 = sharemanager::v1;

// top refreshes no faster: each frame is a GetStatus call.
constexpr base::Duration kMinTopInterval{100};
// Terminal control for top's redraw: cursor home + clear, hide and show the cursor.
constexpr char kClearScreen[] = "\x1b[H\x1b[2J";
constexpr char kHideCursor[] = "\x1b[?25l";
constexpr char kShowCursor[] = "\x1b[?25h";

// SIGINT and SIGTERM, which end top cleanly.
sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// Both ways a call can miss the fence are refused: another epoch (or none)
// at a fenced server, any epoch at an unfenced one.
constexpr char kEpochHelp[] =
    "Fencing epoch: exactly the --epoch the share-manager runs with (leave 0 for one started "
    "without: it refuses a call that carries an epoch)";

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

struct Connection {
  std::shared_ptr<grpc::Channel> channel;
  std::chrono::system_clock::time_point deadline;
};

std::string TargetOf(const std::string& addr) {
  // A bare path means a unix socket.
  return addr.starts_with("/") ? "unix:" + addr : addr;
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& addr, base::Duration timeout,
                                           const base::ClientSecurity& security) {
  grpc::ChannelArguments args;
  // gRPC uses this as the minimum connect timeout: give a slow server the
  // whole --timeout to complete the handshake, and no more.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, static_cast<int>(timeout.count()));
  security.Apply(args);
  return grpc::CreateCustomChannel(TargetOf(addr), security.credentials(), args);
}

// Exit code for a failed call: no connection at all vs. a call that failed.
// `hint` ends the message when there was no connection (what to check).
int FailureCode(const grpc::Status& status, grpc::Channel& channel, const std::string& what,
                const std::string& hint = "") {
  const bool connected = channel.GetState(false) == GRPC_CHANNEL_READY;
  const std::string detail = status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                                 ? "no answer within --timeout (server frozen, overloaded or "
                                   "unreachable)"
                                 : status.error_message();
  std::cerr << "share-manager: " << what << ": " << (connected ? "" : "cannot connect: ") << detail
            << " (gRPC code " << static_cast<int>(status.error_code()) << ")"
            << (connected ? "" : hint) << "\n";
  return connected && status.error_code() != grpc::StatusCode::UNAVAILABLE ? kClientRpcFailed
                                                                           : kClientUnreachable;
}

std::string ToJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

std::string FormatUnixMs(int64_t ms) {
  if (ms <= 0) return "-";
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return absl::StrCat(buf, ".", absl::Dec(ms % 1000, absl::kZeroPad3), "Z");
}

// "memory", "hung", "signal", ...: the cause's enum name without its prefix,
// as the daemon's logs and metrics spell it.
std::string CauseWord(v1::DeathCause cause) {
  std::string name = absl::AsciiStrToLower(v1::DeathCause_Name(cause));
  if (name.starts_with("death_")) name.erase(0, 6);
  return name;
}

// "45.2 MiB RSS (limit 512.0 MiB), 25 threads, 20 fds, 3.4s CPU".
std::string DescribeUsage(const v1::GaneshaUsage& u) {
  std::string limit = "no limit";
  if (u.memory_limit_bytes() > 0) {
    limit =
        u.samples_over_limit() > 0
            ? absl::StrCat("OVER the limit of ", base::FormatBytes(u.memory_limit_bytes()), " in ",
                           u.samples_over_limit(), " of ", u.samples_allowed(), " samples")
            : absl::StrCat("limit ", base::FormatBytes(u.memory_limit_bytes()));
  }
  return absl::StrCat(base::FormatBytes(u.rss_bytes()), " RSS (", limit, "), ", u.threads(),
                      " threads, ", u.open_fds() >= 0 ? absl::StrCat(u.open_fds()) : "?", " fds, ",
                      absl::StrFormat("%.1fs", u.cpu_seconds()), " CPU");
}

std::string Describe(const v1::ShareStatus& s) {
  auto ms = [](uint64_t v) { return base::FormatDuration(base::Duration(v)); };
  std::string out = absl::StrCat(
      "volume:          ", base::EscapeControl(s.volume()), "\n",  //
      "state:           ", v1::ShareState_Name(s.state()), " (", base::EscapeControl(s.reason()),
      ")\n", "since:           ", FormatUnixMs(s.last_transition_unix_ms()), "\n",
      "export:          ", base::EscapeControl(s.export_path()), " as ",
      base::EscapeControl(s.pseudo_path()), s.exported() ? "" : " (withdrawn)", "\n",  //
      "nfs:             ", base::EscapeControl(s.nfs_address()), ":", s.nfs_port(), "\n",
      "ganesha pid:     ", s.ganesha_pid() != 0 ? absl::StrCat(s.ganesha_pid()) : "-",
      s.ganesha_pid() != 0 ? absl::StrCat(" (up ", ms(s.ganesha_uptime_ms()), ")") : "", "\n");
  if (s.has_ganesha_usage()) {
    absl::StrAppend(&out, "ganesha memory:  ", DescribeUsage(s.ganesha_usage()), "\n");
  }
  absl::StrAppend(&out, "restarts:        ", s.restart_count(),
                  s.memory_kills() > 0 ? absl::StrCat(" (", s.memory_kills(), " for memory)") : "",
                  "\n");
  if (s.last_exit().present()) {
    absl::StrAppend(&out, "last exit:       ", base::EscapeControl(s.last_exit().description()),
                    " at ", FormatUnixMs(s.last_exit().unix_ms()), "\n",
                    "exit cause:      ", CauseWord(s.last_exit().cause()), "\n");
  }
  absl::StrAppend(&out, "volume repairs:  ", s.volume_repairs(), "\n");
  if (s.has_lease()) {
    absl::StrAppend(&out, "lease:           ", base::EscapeControl(s.lease().key()),
                    s.lease().held()
                        ? absl::StrCat(" held, valid ", ms(s.lease().valid_for_ms()), " more")
                        : " not held",
                    "\n");
  }
  absl::StrAppend(&out, "remount gen:     ", s.remount_generation(), "\n",
                  "epoch:           ", s.epoch(), "\n", "uptime:          ", ms(s.uptime_ms()),
                  "\n");
  return out;
}

std::string OneLine(const v1::ShareStatus& s) {
  return absl::StrCat(FormatUnixMs(s.last_transition_unix_ms()), " ",
                      v1::ShareState_Name(s.state()), " pid=", s.ganesha_pid(),
                      " restarts=", s.restart_count(), " generation=", s.remount_generation(),
                      " exported=", s.exported() ? "yes" : "no", ": ",
                      base::EscapeControl(s.reason()));
}

class Client {
 public:
  explicit Client(const ClientFlags& flags) : flags_(flags) {}

  // Returns an exit code, or -1 when the flags are fine.
  int Init() {
    auto timeout = base::ParseDuration(flags_.timeout);
    if (!timeout.ok() || timeout->count() == 0) {
      std::cerr << "share-manager: --timeout: "
                << (timeout.ok() ? "must be positive" : timeout.status().message()) << "\n";
      return kClientBadArgs;
    }
    timeout_ = *timeout;
    auto security = base::ResolveClientSecurity(flags_.tls);
    if (!security.ok()) {
      std::cerr << "share-manager: " << security.status().message() << "\n";
      return kClientBadArgs;
    }
    if (security->enabled() && flags_.addr.starts_with("/")) {
      std::cerr << "share-manager: the unix socket is plaintext (its file mode guards it); "
                   "drop the --tls-* flags for it\n";
      return kClientBadArgs;
    }
    // A failed connect says what to check: a plaintext one dropped at once is
    // most often a TLS port; a TLS one, a certificate or name mismatch.
    if (!security->enabled() && !flags_.addr.starts_with("/")) {
      hint_ =
          "; if the share-manager serves TLS, pass --tls-dir (or --tls-cert/--tls-key/--tls-ca)";
    } else if (security->enabled()) {
      hint_ =
          "; with TLS: the server's certificate must chain to --tls-ca and name "
          "--tls-server-name (default: the address's host), and the server must accept this "
          "client's certificate";
    }
    channel_ = MakeChannel(flags_.addr, timeout_, *security);
    return -1;
  }

  void Prepare(grpc::ClientContext& context) const {
    context.set_deadline(std::chrono::system_clock::now() + timeout_);
    context.set_wait_for_ready(false);
  }

  int Status() {
    auto stub = v1::ShareManager::NewStub(channel_);
    grpc::ClientContext context;
    Prepare(context);
    v1::ShareStatus status;
    const auto rpc = stub->GetStatus(&context, v1::GetStatusRequest(), &status);
    if (!rpc.ok()) return FailureCode(rpc, *channel_, "GetStatus", hint_);
    std::cout << (flags_.json ? ToJson(status) + "\n" : Describe(status));
    return kClientOk;
  }

  // Redraws the status every --interval until SIGINT/SIGTERM (blocked by the
  // caller before any thread started, and taken here with sigtimedwait: no
  // handler runs, the terminal is restored) or --iterations. On a terminal
  // each frame replaces the last; otherwise frames follow one another.
  int Top() {
    auto interval = base::ParseDuration(flags_.interval);
    if (!interval.ok() || *interval < kMinTopInterval) {
      std::cerr << "share-manager: --interval: "
                << (interval.ok()
                        ? absl::StrCat("must be at least ", base::FormatDuration(kMinTopInterval))
                        : std::string(interval.status().message()))
                << "\n";
      return kClientBadArgs;
    }
    const int64_t frames = flags_.once ? 1 : flags_.iterations;
    if (frames < 0) {
      std::cerr << "share-manager: --iterations must be 0 (until interrupted) or more\n";
      return kClientBadArgs;
    }
    const bool terminal = isatty(STDOUT_FILENO) == 1;
    const sigset_t stop = StopSignals();
    auto stub = v1::ShareManager::NewStub(channel_);
    std::optional<CpuSample> last_cpu;
    int code = kClientOk;
    if (terminal) std::cout << kHideCursor;
    for (int64_t frame = 1;; ++frame) {
      grpc::ClientContext context;
      Prepare(context);
      v1::ShareStatus status;
      const auto rpc = stub->GetStatus(&context, v1::GetStatusRequest(), &status);
      std::cout << (terminal    ? kClearScreen
                    : frame > 1 ? "\n"
                                : "")
                << "share-manager top: " << flags_.addr << ", every "
                << base::FormatDuration(*interval) << (terminal ? " (Ctrl-C quits)" : "") << ", "
                << FormatUnixMs(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count())
                << "\n";
      if (rpc.ok()) {
        code = kClientOk;
        std::cout << Describe(status) << CpuLine(status, last_cpu);
      } else {
        std::cout << "no status: " << rpc.error_message() << "\n";
        std::cout.flush();
        code = FailureCode(rpc, *channel_, "GetStatus", hint_);
      }
      std::cout.flush();
      if (frames > 0 && frame >= frames) break;
      const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(*interval);
      const timespec timeout{.tv_sec = static_cast<time_t>(wait.count() / 1'000'000'000),
                             .tv_nsec = static_cast<long>(wait.count() % 1'000'000'000)};
      if (sigtimedwait(&stop, nullptr, &timeout) > 0) break;
    }
    if (terminal) std::cout << kShowCursor;
    std::cout.flush();
    return code;
  }

  int Watch() {
    auto stub = v1::ShareManager::NewStub(channel_);
    std::optional<v1::ShareStatus> printed;  // the last status printed
    for (;;) {
      bool answered = false;
      const auto rpc = WatchOnce(*stub, printed, answered);
      if (!answered) {
        return FailureCode(rpc.ok() ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no status")
                                    : grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                                   "no status within --timeout"),
                           *channel_, "WatchStatus", hint_);
      }
      // The server ends every connection after its maximum age (a TLS port
      // re-admits its clients so): the stream is opened again on a new one. A
      // server that is gone does not answer that one within --timeout.
      if (rpc.error_code() == grpc::StatusCode::UNAVAILABLE) continue;
      if (!rpc.ok() && rpc.error_code() != grpc::StatusCode::CANCELLED) {
        return FailureCode(rpc, *channel_, "WatchStatus", hint_);
      }
      std::cerr << "share-manager: the status stream ended (server stopping)\n";
      return kClientOk;
    }
  }

  // One WatchStatus stream: prints each status not printed yet (a stream
  // opened again starts with the current one); `answered` once one came.
  grpc::Status WatchOnce(v1::ShareManager::Stub& stub, std::optional<v1::ShareStatus>& printed,
                         bool& answered) {
    grpc::ClientContext context;
    context.set_wait_for_ready(false);
    // The first message must arrive within --timeout; after that the stream
    // runs until the server ends it or the user interrupts.
    struct {
      absl::Mutex mu;
      bool first ABSL_GUARDED_BY(mu) = false;
      bool done ABSL_GUARDED_BY(mu) = false;
    } progress;
    std::thread guard([&] {
      absl::MutexLock lock(&progress.mu);
      auto first_or_done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(progress.mu) {
        return progress.done || progress.first;
      };
      if (!progress.mu.AwaitWithTimeout(absl::Condition(&first_or_done),
                                        absl::FromChrono(timeout_))) {
        context.TryCancel();
      }
    });
    auto reader = stub.WatchStatus(&context, v1::WatchStatusRequest());
    v1::ShareStatus status;
    while (reader->Read(&status)) {
      if (!answered) {
        answered = true;
        absl::MutexLock lock(&progress.mu);
        progress.first = true;
      }
      const bool seen = printed && printed->started_unix_ms() == status.started_unix_ms() &&
                        printed->version() >= status.version();
      if (seen) continue;
      std::cout << (flags_.json ? ToJson(status) : OneLine(status)) << std::endl;
      printed = status;
    }
    {
      absl::MutexLock lock(&progress.mu);
      progress.done = true;
    }
    guard.join();
    return reader->Finish();
  }

  int Mount() {
    auto stub = v1::ShareManager::NewStub(channel_);
    grpc::ClientContext context;
    Prepare(context);
    v1::MountRequest request;
    request.set_epoch(flags_.epoch);
    request.set_generation(flags_.generation);
    v1::MountResponse response;
    const auto rpc = stub->Mount(&context, request, &response);
    if (!rpc.ok()) return FailureCode(rpc, *channel_, "Mount", hint_);
    std::cout << (flags_.json ? ToJson(response)
                              : absl::StrCat("mounted; handled remount generation ",
                                             response.handled_generation()))
              << "\n";
    return kClientOk;
  }

  int Unmount() {
    auto stub = v1::ShareManager::NewStub(channel_);
    grpc::ClientContext context;
    Prepare(context);
    v1::UnmountRequest request;
    request.set_epoch(flags_.epoch);
    v1::UnmountResponse response;
    const auto rpc = stub->Unmount(&context, request, &response);
    if (!rpc.ok()) return FailureCode(rpc, *channel_, "Unmount", hint_);
    std::cout << (flags_.json ? ToJson(response) : std::string("unmounted; ganesha keeps running"))
              << "\n";
    return kClientOk;
  }

  int Probe() {
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    Prepare(context);
    HealthCheckRequest request;
    request.set_service(flags_.service);
    HealthCheckResponse response;
    const auto rpc = stub->Check(&context, request, &response);
    if (!rpc.ok()) return FailureCode(rpc, *channel_, "health check", hint_);
    const auto name = HealthCheckResponse::ServingStatus_Name(response.status());
    std::cout << "status: " << name << "\n";
    return response.status() == HealthCheckResponse::SERVING ? kClientOk : kClientNotServing;
  }

 private:
  // ganesha's CPU time at a frame, for the next frame's rate.
  struct CpuSample {
    int32_t pid;
    double cpu_seconds;
    std::chrono::steady_clock::time_point at;
  };

  // "ganesha cpu:     1.5% since the last frame", once two frames saw the same ganesha.
  static std::string CpuLine(const v1::ShareStatus& s, std::optional<CpuSample>& last) {
    if (!s.has_ganesha_usage()) {
      last.reset();
      return "";
    }
    const CpuSample now{s.ganesha_pid(), s.ganesha_usage().cpu_seconds(),
                        std::chrono::steady_clock::now()};
    std::string line;
    if (last && last->pid == now.pid && now.at > last->at) {
      const double seconds = std::chrono::duration<double>(now.at - last->at).count();
      line = absl::StrFormat("ganesha cpu:     %.1f%% since the last frame\n",
                             100 * (now.cpu_seconds - last->cpu_seconds) / seconds);
    }
    last = now;
    return line;
  }

  const ClientFlags& flags_;
  base::Duration timeout_{0};
  std::string hint_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace

void AddClientCommands(CLI::App& app, ClientFlags& flags, int* exit_code) {
  // `takes_stop_signals`: SIGINT/SIGTERM are blocked before any thread starts
  // (gRPC's), so the command takes them itself and ends cleanly.
  auto add = [&](const char* name, const char* help, auto method, bool takes_stop_signals = false) {
    CLI::App* cmd = app.add_subcommand(name, help);
    cmd->add_option("--addr", flags.addr,
                    "share-manager gRPC address HOST:PORT or unix socket path")
        ->capture_default_str();
    cmd->add_option("--timeout", flags.timeout, "Deadline for the call (connect included)")
        ->capture_default_str();
    base::AddTlsFlags(*cmd, flags.tls, base::TlsRole::kClient);
    cmd->callback([&flags, exit_code, method, takes_stop_signals] {
      if (takes_stop_signals) {
        const sigset_t stop = StopSignals();
        pthread_sigmask(SIG_BLOCK, &stop, nullptr);
      }
      Client client(flags);
      *exit_code = client.Init();
      if (*exit_code < 0) *exit_code = (client.*method)();
    });
    return cmd;
  };
  add("status", "Print the share's status", &Client::Status)
      ->add_flag("--json", flags.json, "Print JSON");
  auto* top = add("top",
                  "Show the share's key figures (state, restarts, memory, repairs), refreshed "
                  "every --interval until Ctrl-C or SIGTERM",
                  &Client::Top, /*takes_stop_signals=*/true);
  top->add_option("--interval", flags.interval, "Refresh period (at least 100ms)")
      ->capture_default_str();
  top->add_option("--iterations", flags.iterations, "Frames to show, then exit (0: until stopped)")
      ->capture_default_str();
  top->add_flag("--once", flags.once, "Show one frame and exit (--iterations 1)");
  add("watch", "Print the status now and at every change, until the server stops", &Client::Watch)
      ->add_flag("--json", flags.json, "Print JSON, one object per line");
  auto* mount = add("mount", "(Re)export the share", &Client::Mount);
  mount->add_option("--epoch", flags.epoch, kEpochHelp);
  mount->add_option("--generation", flags.generation,
                    "Remount generation to handle (0: one more); an old one is a no-op");
  mount->add_flag("--json", flags.json, "Print JSON");
  auto* unmount = add("unmount", "Withdraw the export (ganesha keeps running)", &Client::Unmount);
  unmount->add_option("--epoch", flags.epoch, kEpochHelp);
  unmount->add_flag("--json", flags.json, "Print JSON");
  add("probe",
      "grpc.health.v1 check; exit 0 iff SERVING (1 bad args, 2 unreachable, 3 RPC failed, "
      "4 not SERVING)",
      &Client::Probe)
      ->add_option("--service", flags.service,
                   "Health service: \"\" or readiness (ready to serve NFS), liveness");
}

}  // namespace sharemgr
