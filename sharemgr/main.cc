// share-manager: serves one ReadWriteMany volume over NFSv4 with a supervised
// nfs-ganesha (`daemon`), and the client commands that talk to it.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "base/fmt_absl.h"
#include "base/json_log.h"
#include "base/tls13_only.h"
#include "sharemgr/capped_listener.h"
#include "sharemgr/client_commands.h"
#include "sharemgr/daemon.h"
#include "sharemgr/daemon_config.h"
#include "sharemgr/exit_codes.h"
#include "sharemgr/lease_fencer.h"
#include "sharemgr/termination_message.h"

namespace {

// Text lines (colored on a terminal) or, with --log-format json, one JSON
// object per line carrying the volume and epoch (base/json_log.h). What
// share-manager itself logs at error level also reaches `last_error`.
void SetUpLogging(const std::string& level, const std::string& format,
                  const sharemgr::DaemonFlags& flags,
                  const std::shared_ptr<sharemgr::LastErrorSink>& last_error) {
  const bool json = format == "json";
  std::shared_ptr<spdlog::sinks::sink> sink;
  if (json) {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  } else {
    sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  }
  auto main_logger =
      std::make_shared<spdlog::logger>("share-manager", spdlog::sinks_init_list{sink, last_error});
  auto ganesha_logger = std::make_shared<spdlog::logger>("ganesha", sink);
  for (const auto& logger : {main_logger, ganesha_logger}) {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%-5l%$ [%n] %v");
    logger->set_level(spdlog::level::from_str(level));
    logger->flush_on(spdlog::level::trace);
  }
  spdlog::register_logger(ganesha_logger);
  spdlog::set_default_logger(main_logger);
  if (json) {
    base::UseJsonLogs("share-manager", {{"volume", flags.volume}, {"epoch", flags.epoch}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The serving lease's fencer (sharemgr/lease_fencer.h), started by the
  // daemon: not for people, so not in --help, and nothing else set up first.
  if (argc >= 2 && std::string_view(argv[1]) == sharemgr::kLeaseFencerCommand) {
    return sharemgr::RunLeaseFencer();
  }
  // First, while no thread and no gRPC object exists: gRPC's poller, epoll1
  // where it works (see PinGrpcPollStrategy).
  sharemgr::PinGrpcPollStrategy();
  // Also before any thread: OpenSSL's configuration is swapped in place.
  base::OfferOnlyTls13();
  CLI::App app{
      "share-manager serves one ReadWriteMany volume over NFSv4: it runs and supervises\n"
      "nfs-ganesha, restarts it in place when it dies or hangs, and publishes its health\n"
      "over gRPC (sharemanager.v1.ShareManager and grpc.health.v1)."};
  app.set_version_flag("--version", "share-manager " SHAREMGR_VERSION);
  app.require_subcommand(1);

  sharemgr::DaemonFlags daemon_flags;
  std::string log_level = "info";
  std::string log_format = "text";
  bool debug = false;
  app.add_flag("--debug", debug, "Log at debug level (Longhorn's flag; same as --log-level debug)");
  CLI::App* daemon = app.add_subcommand(
      "daemon",
      "Serve the volume: export it with ganesha and supervise it.\n"
      "Exit codes: 0 stopped by SIGTERM/SIGINT, 1 internal error, 2 invalid flags,\n"
      "3 ganesha died too often (FAILED), 4 cannot listen or use the state/export dir,\n"
      "5 the block device cannot be used or repaired, 6 the serving lease (--lease-etcd)\n"
      "was lost or could not be taken.");
  sharemgr::AddDaemonFlags(*daemon, daemon_flags);
  daemon->add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  daemon
      ->add_option("--log-format", log_format,
                   "text, or json: one JSON object per line (time, level, component, volume, "
                   "epoch, message, the event's fields)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  sharemgr::ClientFlags client_flags;
  int exit_code = sharemgr::kExitInternal;
  sharemgr::AddClientCommands(app, client_flags, &exit_code);

  // Why the daemon ended, for kubelet (sharemgr/termination_message.h).
  const auto& last_error = sharemgr::ProcessLastErrorSink();
  daemon->callback([&] {
    SetUpLogging(debug ? "debug" : log_level, log_format, daemon_flags, last_error);
    auto config = sharemgr::ResolveDaemonConfig(daemon_flags);
    if (!config.ok()) {
      // A log shipper reads JSON lines only.
      if (log_format == "json") {
        spdlog::error("{}", config.status().message());
      } else {
        std::cerr << "share-manager: " << config.status().message() << "\n";
      }
      sharemgr::WriteTerminationMessage(absl::StrCat("share-manager: ", config.status().message()));
      exit_code = sharemgr::kExitBadInput;
      return;
    }
    exit_code = sharemgr::RunDaemon(*config);
    if (exit_code != sharemgr::kExitStopped) {
      sharemgr::WriteTerminationMessage(last_error->last_error());
    }
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    app.exit(e);
    // The daemon keeps exit code 2 for bad input; client commands keep
    // grpc_health_probe's 1.
    if (!daemon->parsed()) return sharemgr::kClientBadArgs;
    sharemgr::WriteTerminationMessage(absl::StrCat("share-manager: ", e.what()));
    return sharemgr::kExitBadInput;
  }
  return exit_code;
}
