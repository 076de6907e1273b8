#include "sharemgr/client_commands.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <ctime>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "sharemanager/v1/sharemanager.grpc.pb.h"
#include "sharemgr/exit_codes.h"

namespace sharemgr {
namespace {

namespace v1 = sharemanager::v1;

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

std::string Describe(const v1::ShareStatus& s) {
  auto ms = [](uint64_t v) { return base::FormatDuration(base::Duration(v)); };
  std::string out = absl::StrCat(
      "volume:          ", s.volume(), "\n",  //
      "state:           ", v1::ShareState_Name(s.state()), " (", s.reason(), ")\n",
      "since:           ", FormatUnixMs(s.last_transition_unix_ms()), "\n",
      "export:          ", s.export_path(), " as ", s.pseudo_path(),
      s.exported() ? "" : " (withdrawn)", "\n",  //
      "nfs:             ", s.nfs_address(), ":", s.nfs_port(), "\n",
      "ganesha pid:     ", s.ganesha_pid() != 0 ? absl::StrCat(s.ganesha_pid()) : "-",
      s.ganesha_pid() != 0 ? absl::StrCat(" (up ", ms(s.ganesha_uptime_ms()), ")") : "", "\n",
      "restarts:        ", s.restart_count(), "\n");
  if (s.last_exit().present()) {
    absl::StrAppend(&out, "last exit:       ", s.last_exit().description(), " at ",
                    FormatUnixMs(s.last_exit().unix_ms()), "\n");
  }
  if (s.has_lease()) {
    absl::StrAppend(&out, "lease:           ", s.lease().key(),
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
                      " exported=", s.exported() ? "yes" : "no", ": ", s.reason());
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
  const ClientFlags& flags_;
  base::Duration timeout_{0};
  std::string hint_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace

void AddClientCommands(CLI::App& app, ClientFlags& flags, int* exit_code) {
  auto add = [&](const char* name, const char* help, auto method) {
    CLI::App* cmd = app.add_subcommand(name, help);
    cmd->add_option("--addr", flags.addr,
                    "share-manager gRPC address HOST:PORT or unix socket path")
        ->capture_default_str();
    cmd->add_option("--timeout", flags.timeout, "Deadline for the call (connect included)")
        ->capture_default_str();
    base::AddTlsFlags(*cmd, flags.tls, base::TlsRole::kClient);
    cmd->callback([&flags, exit_code, method] {
      Client client(flags);
      *exit_code = client.Init();
      if (*exit_code < 0) *exit_code = (client.*method)();
    });
    return cmd;
  };
  add("status", "Print the share's status", &Client::Status)
      ->add_flag("--json", flags.json, "Print JSON");
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
