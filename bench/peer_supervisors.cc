#include "bench/peer_supervisors.h"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "sharemgr/ganesha_config.h"

namespace bench {
namespace {

absl::Status WriteFile(const std::string& path, const std::string& content, mode_t mode = 0644) {
  std::ofstream out(path);
  out << content;
  out.close();
  if (!out) return absl::InternalError("cannot write " + path);
  chmod(path.c_str(), mode);
  return absl::OkStatus();
}

}  // namespace

const char* PeerName(PeerKind kind) {
  return kind == PeerKind::kS6 ? "s6-supervise" : "supervisord";
}

absl::StatusOr<std::unique_ptr<PeerSupervisor>> PeerSupervisor::Start(PeerKind kind,
                                                                      const std::string& dir,
                                                                      const std::string& volume,
                                                                      uint16_t nfs_port) {
  std::unique_ptr<PeerSupervisor> peer(new PeerSupervisor());
  peer->dir_ = dir;
  peer->export_dir_ = dir + "/export";
  const std::string state = dir + "/state";
  for (const auto& d : {peer->export_dir_, state, state + "/recovery"}) {
    if (auto s = base::EnsureDirectory(d, 0755); !s.ok()) return s;
  }
  auto config =
      sharemgr::GaneshaConfig::Create({.volume = volume,
                                       .export_dir = peer->export_dir_,
                                       .bind_address = "127.0.0.1",
                                       .nfs_port = nfs_port,
                                       .grace_seconds = 2,
                                       .lease_seconds = 2,
                                       .recovery_root = state + "/recovery",
                                       .plugins_dir = "/usr/lib/x86_64-linux-gnu/ganesha"});
  if (!config.ok()) return config.status();
  const std::string conf = state + "/ganesha.conf";
  if (auto s = WriteFile(conf, config->Render(true)); !s.ok()) return s;
  peer->pid_file_ = state + "/ganesha.pid";
  const std::string ganesha = absl::StrCat("ganesha.nfsd -F -f ", conf, " -L ", state,
                                           "/ganesha.log -p ", peer->pid_file_, " -N NIV_EVENT");
  std::vector<std::string> argv;
  if (kind == PeerKind::kS6) {
    const std::string svc = dir + "/svc";
    if (auto s = base::EnsureDirectory(svc, 0755); !s.ok()) return s;
    if (auto s = WriteFile(svc + "/run", absl::StrCat("#!/bin/sh\nexec ", ganesha, "\n"), 0755);
        !s.ok()) {
      return s;
    }
    argv = {"s6-supervise", svc};
  } else {
    const std::string ini = dir + "/supervisord.conf";
    if (auto s = WriteFile(ini, absl::StrCat("[supervisord]\nnodaemon=true\nlogfile=", dir,
                                             "/supervisord.log\npidfile=", dir,
                                             "/supervisord.pid\n\n[program:ganesha]\ncommand=",
                                             ganesha, "\nautorestart=true\nstopsignal=TERM\n"));
        !s.ok()) {
      return s;
    }
    argv = {"supervisord", "-c", ini};
  }
  auto process = supervisor::ChildProcess::Spawn(argv);
  if (!process.ok()) return process.status();
  peer->process_ = std::move(*process);
  return peer;
}

PeerSupervisor::~PeerSupervisor() {
  const pid_t ganesha = GaneshaPid();
  if (process_) {
    process_->SignalGroup(SIGTERM);
    pollfd p{process_->pidfd(), POLLIN, 0};
    if (poll(&p, 1, 5000) <= 0) process_->SignalGroup(SIGKILL);
    poll(&p, 1, 5000);
    (void)process_->Reap();
  }
  std::ifstream cmdline(absl::StrCat("/proc/", ganesha, "/cmdline"));
  std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
  if (ganesha > 0 && args.find(dir_) != std::string::npos) {
    // A ganesha left stopped by a hang run survives its supervisor; end it by pid.
    kill(ganesha, SIGCONT);
    kill(ganesha, SIGKILL);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

pid_t PeerSupervisor::GaneshaPid() const {
  std::ifstream in(pid_file_);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

}  // namespace bench
