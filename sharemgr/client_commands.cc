#include "sharemgr/client_commands.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
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

// protobuf's JSON mapping, as every proto3 reader expects it.
constexpr char kJsonHelp[] =
    "Print JSON (proto3 JSON mapping: field names as in the .proto, every field even when 0, "
    "64-bit integers as strings, e.g. \"uptime_ms\":\"1500\")";

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

// The hint that ends a cannot-connect error, when a TLS handshake was what
// failed (gRPC says so in its message; a refused connection or a failed name
// lookup never gets one). A plaintext client's connection that the server
// drops at once ("Socket closed") is a TLS port's answer to it.
std::string TlsHint(const grpc::Status& status, bool tls) {
  const std::string message = absl::AsciiStrToLower(status.error_message());
  if (tls) {
    for (const char* sign : {"handshake", "ssl", "tsi_", "certificate", "check peer", "alpn"}) {
      if (absl::StrContains(message, sign)) {
        return "; with TLS: the server's certificate must chain to --tls-ca and name "
               "--tls-server-name (default: the address's host), and the server must accept "
               "this client's certificate";
      }
    }
    return "";
  }
  return absl::StrContains(message, "socket closed") ||
                 absl::StrContains(message, "connection reset")
             ? "; if the share-manager serves TLS, pass --tls-dir (or "
               "--tls-cert/--tls-key/--tls-ca)"
             : "";
}

// --addr's port, when it has one: 1-65535 (gRPC would take 99999 modulo 65536).
absl::Status CheckAddrPort(const std::string& addr) {
  if (addr.starts_with("/")) return absl::OkStatus();  // a unix socket
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos || addr.ends_with("]")) return absl::OkStatus();  // no port
  uint32_t port = 0;
  if (!absl::SimpleAtoi(addr.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--addr ", base::EscapeControl(addr),
                                                   ": the port must be a number from 1 to 65535"));
  }
  return absl::OkStatus();
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
    if (auto port = CheckAddrPort(flags_.addr); !port.ok()) {
      std::cerr << "share-manager: " << port.message() << "\n";
      return kClientBadArgs;
    }
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
    tls_ = security->enabled();
    channel_ = MakeChannel(flags_.addr, timeout_, *security);
    return -1;
  }

  // Exit code for a failed call: no connection at all vs. a call that failed.
  // A cannot-connect error ends with a TLS hint when the handshake failed.
  int Failed(const grpc::Status& status, const std::string& what) {
    const bool connected = channel_->GetState(false) == GRPC_CHANNEL_READY;
    std::string detail = status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                             ? "no answer within --timeout (server frozen, overloaded or "
                               "unreachable)"
                             : status.error_message();
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED && ServesOnlyHealth()) {
      detail =
          "this is the health-only port (grpc.health.v1 Check only); use the address of the "
          "share-manager's --listen (or its --socket)";
    }
    std::cerr << "share-manager: " << what << ": " << (connected ? "" : "cannot connect: ")
              << detail << " (gRPC code " << static_cast<int>(status.error_code()) << ")"
              << (connected || flags_.addr.starts_with("/") ? "" : TlsHint(status, tls_)) << "\n";
    return connected && status.error_code() != grpc::StatusCode::UNAVAILABLE ? kClientRpcFailed
                                                                             : kClientUnreachable;
  }

  // Whether the server answers grpc.health.v1 Check: then a ShareManager call
  // it did not know reached the health-only port (--health-listen).
  bool ServesOnlyHealth() {
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    Prepare(context);
    HealthCheckResponse response;
    return stub->Check(&context, HealthCheckRequest(), &response).ok();
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
    if (!rpc.ok()) return Failed(rpc, "GetStatus");
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
        code = Failed(rpc, "GetStatus");
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
        return Failed(rpc.ok() ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no status")
                               : grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                              "no status within --timeout"),
                      "WatchStatus");
      }
      // The server ends every connection after its maximum age (a TLS port
      // re-admits its clients so): the stream is opened again on a new one. A
      // server that is gone does not answer that one within --timeout.
      if (rpc.error_code() == grpc::StatusCode::UNAVAILABLE) continue;
      if (!rpc.ok() && rpc.error_code() != grpc::StatusCode::CANCELLED) {
        return Failed(rpc, "WatchStatus");
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

  // One unary ShareManager call, its answer printed as `text` says it, or as JSON.
  template <typename Request, typename Response>
  int Call(const char* what,
           grpc::Status (v1::ShareManager::Stub::*method)(grpc::ClientContext*, const Request&,
                                                          Response*),
           const Request& request, const std::function<std::string(const Response&)>& text) {
    auto stub = v1::ShareManager::NewStub(channel_);
    grpc::ClientContext context;
    Prepare(context);
    Response response;
    const auto rpc = ((*stub).*method)(&context, request, &response);
    if (!rpc.ok()) return Failed(rpc, what);
    std::cout << (flags_.json ? ToJson(response) : text(response)) << "\n";
    return kClientOk;
  }

  int Mount() {
    v1::MountRequest request;
    request.set_epoch(flags_.epoch);
    request.set_generation(flags_.generation);
    return Call<v1::MountRequest, v1::MountResponse>(
        "Mount", &v1::ShareManager::Stub::Mount, request, [](const v1::MountResponse& r) {
          return absl::StrCat("mounted; handled remount generation ", r.handled_generation());
        });
  }

  int Unmount() {
    v1::UnmountRequest request;
    request.set_epoch(flags_.epoch);
    return Call<v1::UnmountRequest, v1::UnmountResponse>(
        "Unmount", &v1::ShareManager::Stub::Unmount, request,
        [](const v1::UnmountResponse&) { return std::string("unmounted; ganesha keeps running"); });
  }

  int Trim() {
    v1::FilesystemTrimRequest request;
    request.set_epoch(flags_.epoch);
    return Call<v1::FilesystemTrimRequest, v1::FilesystemTrimResponse>(
        "FilesystemTrim", &v1::ShareManager::Stub::FilesystemTrim, request,
        [](const v1::FilesystemTrimResponse& r) {
          return absl::StrCat("trimmed ", base::FormatBytes(r.bytes_trimmed()), " (",
                              r.bytes_trimmed(), " bytes)");
        });
  }

  int Resize() {
    v1::FilesystemResizeRequest request;
    request.set_epoch(flags_.epoch);
    return Call<v1::FilesystemResizeRequest, v1::FilesystemResizeResponse>(
        "FilesystemResize", &v1::ShareManager::Stub::FilesystemResize, request,
        [](const v1::FilesystemResizeResponse& r) {
          return r.resized()
                     ? absl::StrCat("resized from ", base::FormatBytes(r.old_size_bytes()), " to ",
                                    base::FormatBytes(r.new_size_bytes()))
                     : absl::StrCat("not resized: the filesystem already fills its device (",
                                    base::FormatBytes(r.new_size_bytes()), ")");
        });
  }

  int Probe() {
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    Prepare(context);
    HealthCheckRequest request;
    request.set_service(flags_.service);
    HealthCheckResponse response;
    const auto rpc = stub->Check(&context, request, &response);
    if (!rpc.ok()) return Failed(rpc, "health check");
    const auto name = HealthCheckResponse::ServingStatus_Name(response.status());
    std::cout << (flags_.json ? ToJson(response) : "status: " + name) << "\n";
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
  bool tls_ = false;
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
      ->add_flag("--json", flags.json, kJsonHelp);
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
      ->add_flag("--json", flags.json, absl::StrCat(kJsonHelp, ", one object per line"));
  // Epochs and generations are unsigned, and CLI11 would read "-1" modulo 2^64.
  const CLI::Validator not_negative(
      [](std::string& value) {
        return absl::StartsWith(absl::StripLeadingAsciiWhitespace(value), "-")
                   ? std::string("must be 0 or more, not negative")
                   : std::string();
      },
      "NOT NEGATIVE");
  auto add_epoch = [&](CLI::App* cmd) {
    cmd->add_option("--epoch", flags.epoch, kEpochHelp)->check(not_negative);
    cmd->add_flag("--json", flags.json, kJsonHelp);
    return cmd;
  };
  auto* mount = add_epoch(add("mount", "(Re)export the share", &Client::Mount));
  mount
      ->add_option("--generation", flags.generation,
                   "Remount generation to handle (0: one more); an old one is a no-op")
      ->check(not_negative);
  add_epoch(add("unmount", "Withdraw the export (ganesha keeps running)", &Client::Unmount));
  add_epoch(add("trim",
                "FITRIM the mounted filesystem: give unused blocks back to the device (bounded by "
                "--timeout; refused while another trim runs)",
                &Client::Trim));
  add_epoch(add("resize",
                "Grow the filesystem online to the size of its device (a no-op when it "
                "already fills it)",
                &Client::Resize));
  auto* probe = add("probe",
                    "grpc.health.v1 check; exit 0 iff SERVING (1 bad args, 2 unreachable, 3 RPC "
                    "failed, 4 not SERVING)",
                    &Client::Probe);
  probe->add_option("--service", flags.service,
                    "Health service: \"\" or readiness (ready to serve NFS), liveness");
  probe->add_flag("--json", flags.json, kJsonHelp);
}

}  // namespace sharemgr
