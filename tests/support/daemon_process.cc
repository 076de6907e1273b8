#include "tests/support/daemon_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/loopback_port.h"
#include "base/unique_fd.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/support/leftovers.h"
#include "tests/support/loop_device.h"
#include "tests/support/nfs_client.h"

namespace testing_support {
namespace {

namespace v1 = sharemanager::v1;
using Clock = std::chrono::steady_clock;

bool WaitReadable(int fd, milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, static_cast<int>(timeout.count())) > 0;
}

}  // namespace

std::vector<pid_t> ProcessesMentioning(const std::string& text) {
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline");
    std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    std::replace(args.begin(), args.end(), '\0', ' ');
    if (args.find(text) != std::string::npos) found.push_back(std::stoi(name));
  }
  return found;
}

std::string ShareManagerBinary() {
  if (const char* env = std::getenv("SHAREMGR_BINARY")) return env;
  return SHAREMGR_BINARY;
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(DaemonSpec spec) {
  std::unique_ptr<DaemonProcess> d(new DaemonProcess());
  char tmpl[] = "/tmp/sharemgr-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  d->dir_ = tmpl;
  d->export_dir_ = spec.default_export_dir ? "/export/" + spec.volume : d->dir_ + "/export";
  d->state_dir_ = d->dir_ + "/state";
  d->volume_ = spec.volume;
  d->nfs_port_ = base::FreeLoopbackPort();
  d->address_ = spec.address;
  d->addr_ = absl::StrCat(d->address_, ":", base::FreeLoopbackPort());
  d->health_addr_ = absl::StrCat(d->address_, ":", base::FreeLoopbackPort());
  std::vector<std::string> argv = spec.wrapper;
  argv.push_back(ShareManagerBinary());
  argv.insert(argv.end(), spec.global_flags.begin(), spec.global_flags.end());
  argv.push_back("daemon");
  if (!spec.default_export_dir) {
    argv.push_back("--export-dir");
    argv.push_back(spec.spell_export_dir ? spec.spell_export_dir(d->export_dir_) : d->export_dir_);
  }
  argv.insert(argv.end(),
              {"--volume",         spec.volume, "--state-dir",    d->state_dir_,
               "--nfs-address",    d->address_, "--nfs-port",     std::to_string(d->nfs_port_),
               "--listen",         d->addr_,    "--grace-period", "2",
               "--lease-lifetime", "2",         "--stop-timeout", "3s",
               "--failed-linger",  "1s",        "--log-level",    "debug"});
  argv.insert(argv.end(), {"--health-listen", d->health_addr_});  // never the default 9601
  argv.insert(argv.end(), spec.extra_flags.begin(), spec.extra_flags.end());
  auto child = supervisor::ChildProcess::Spawn(argv);
  if (!child.ok()) return child.status();
  d->child_ = std::move(*child);
  d->reader_ = std::thread([raw = d.get(), fd = d->child_->output_fd()] {
    char buf[4096];
    while (!raw->stop_reader_) {
      if (raw->paused_) {
        std::this_thread::sleep_for(milliseconds(10));
        continue;
      }
      std::lock_guard reading(raw->read_mu_);
      if (raw->paused_ || !WaitReadable(fd, milliseconds(50))) continue;
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) {
        std::lock_guard lock(raw->output_mu_);
        raw->output_.append(buf, static_cast<size_t>(n));
      }
      if (n == 0) {  // the daemon and everything holding its pipe are gone
        raw->output_complete_ = true;
        return;
      }
    }
  });
  if (spec.wait_until_serving) {
    if (auto s = d->WaitServing(); !s.ok()) {
      return absl::Status(s.status().code(),
                          absl::StrCat(s.status().message(), "\ndaemon output:\n", d->output()));
    }
  }
  return d;
}

DaemonProcess::~DaemonProcess() {
  ResumeOutput();  // a daemon blocked on its log could not stop
  if (child_ && !exit_code_) {
    Signal(SIGCONT);
    Signal(SIGTERM);
    if (!WaitExit(milliseconds(8000)).ok()) {
      ReportLeftover(absl::StrCat("share-manager pid ", child_->pid(), " (", dir_,
                                  ") did not stop within 8 s of SIGTERM; SIGKILLed"));
      child_->SignalGroup(SIGKILL);
      (void)WaitExit(milliseconds(5000));
    }
  }
  stop_reader_ = true;
  if (reader_.joinable()) reader_.join();
  KillLeftovers();
  if (!dir_.empty() && UnmountLeftovers()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

// What the daemon started dies with it: ganesha by PR_SET_PDEATHSIG, the
// lease fencer when its channel ends. Both name the state dir on their
// command line; one still running 2 s after the daemon exited means that
// broke: it is killed (by pidfd, so never another process that got its pid)
// and reported, failing the run.
void DaemonProcess::KillLeftovers() {
  if (state_dir_.empty()) return;
  for (const pid_t pid : ProcessesMentioning(state_dir_)) {
    const base::UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
    if (pidfd.get() < 0) continue;  // gone
    if (WaitReadable(pidfd.get(), milliseconds(2000))) continue;
    // Still the same process (its pid was not reused meanwhile)?
    const auto still = ProcessesMentioning(state_dir_);
    if (std::find(still.begin(), still.end(), pid) == still.end()) continue;
    std::ifstream comm(absl::StrCat("/proc/", pid, "/comm"));
    std::string name;
    std::getline(comm, name);
    ReportLeftover(absl::StrCat(name, " pid ", pid, " (", state_dir_,
                                ") outlived its share-manager by 2 s: killed"));
    syscall(SYS_pidfd_send_signal, pidfd.get(), SIGCONT, nullptr, 0);
    syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
    (void)WaitReadable(pidfd.get(), milliseconds(5000));
  }
}

// The daemon unmounts its volume on the way out; a mount left under the
// test's directory is reported, then unmounted, so that removing the
// directory never deletes files inside a mounted filesystem. False when
// something stays mounted (the directory is then left alone).
bool DaemonProcess::UnmountLeftovers() {
  bool clear = true;
  auto targets = MountsUnder(dir_);
  if (!export_dir_.starts_with(dir_ + "/")) {
    const auto outside = MountsUnder(export_dir_);
    targets.insert(targets.begin(), outside.begin(), outside.end());
  }
  for (const auto& target : targets) {
    ReportLeftover(absl::StrCat(target, " still mounted after share-manager exited"));
    if (!Run({"umount", target}).ok() && !Run({"umount", "-l", target}).ok()) clear = false;
  }
  return clear;
}

std::unique_ptr<v1::ShareManager::Stub> DaemonProcess::Stub() const {
  return v1::ShareManager::NewStub(grpc::CreateChannel(addr_, grpc::InsecureChannelCredentials()));
}

absl::StatusOr<v1::ShareStatus> DaemonProcess::Status(milliseconds timeout) const {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::ShareStatus status;
  // A fresh channel per call: a shared one that failed to connect while the
  // daemon was starting would sit out gRPC's reconnect backoff.
  auto channel = grpc::CreateChannel(addr_, grpc::InsecureChannelCredentials());
  const auto rpc =
      v1::ShareManager::NewStub(channel)->GetStatus(&context, v1::GetStatusRequest(), &status);
  if (!rpc.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(rpc.error_code()), rpc.error_message());
  }
  return status;
}

absl::StatusOr<v1::ShareStatus> DaemonProcess::WaitFor(
    const std::function<bool(const v1::ShareStatus&)>& done, milliseconds timeout,
    const std::string& what) {
  const auto deadline = Clock::now() + timeout;
  absl::StatusOr<v1::ShareStatus> last = absl::UnavailableError("no status yet");
  while (Clock::now() < deadline) {
    last = Status(milliseconds(500));
    if (last.ok() && done(*last)) return last;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "timed out waiting for ", what,
      "; last: ", last.ok() ? last->ShortDebugString() : std::string(last.status().message())));
}

absl::StatusOr<v1::ShareStatus> DaemonProcess::WaitServing(milliseconds timeout) {
  return WaitFor([](const v1::ShareStatus& s) { return s.state() == v1::SERVING; }, timeout,
                 "SERVING");
}

absl::StatusOr<bool> DaemonProcess::HealthServing(const std::string& service,
                                                  milliseconds timeout) const {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(addr_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const auto rpc = stub->Check(&context, request, &response);
  if (!rpc.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(rpc.error_code()), rpc.error_message());
  }
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

absl::Status DaemonProcess::WriteEventually(const std::string& path, const std::string& data,
                                            milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  absl::Status last;
  do {
    last = WriteOnce(address_, nfs_port_, pseudo_path(), path, data, milliseconds(2000));
    if (last.ok()) return last;
    std::this_thread::sleep_for(milliseconds(50));
  } while (Clock::now() < deadline);
  return last;
}

absl::StatusOr<std::string> DaemonProcess::ReadEventually(const std::string& path,
                                                          milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  absl::StatusOr<std::string> last;
  do {
    last = ReadOnce(address_, nfs_port_, pseudo_path(), path, milliseconds(2000));
    if (last.ok()) return last;
    std::this_thread::sleep_for(milliseconds(50));
  } while (Clock::now() < deadline);
  return last;
}

void DaemonProcess::Signal(int sig) const {
  if (child_ && !exit_code_) kill(child_->pid(), sig);
}

absl::StatusOr<int> DaemonProcess::WaitExit(milliseconds timeout) {
  if (exit_code_) return *exit_code_;
  if (!WaitReadable(child_->pidfd(), timeout)) {
    return absl::DeadlineExceededError("share-manager did not exit in time");
  }
  auto exit = child_->Reap();
  if (!exit.ok()) return exit.status();
  exit_code_ = exit->ShellCode();
  // Its last words (the reason it exited) may still be in the pipe: the
  // reader gets them all once every holder of the pipe is gone.
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(2000);
  while (!output_complete_ && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  return *exit_code_;
}

absl::Status DaemonProcess::FillOutputPipe() {
  paused_ = true;
  { std::lock_guard reading(read_mu_); }  // a read under way has ended
  // A second writer of the daemon's own stderr pipe.
  const base::UniqueFd pipe(
      open(absl::StrCat("/proc/", pid(), "/fd/2").c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  if (!pipe)
    return absl::InternalError(absl::StrCat("open the daemon's stderr: ", strerror(errno)));
  // Whole lines while they fit, then single bytes: full to the last byte.
  constexpr char kLine[] = "#filler\n";
  while (write(pipe.get(), kLine, sizeof(kLine) - 1) > 0) {
  }
  while (write(pipe.get(), "\n", 1) > 0) {
  }
  if (errno != EAGAIN) {
    return absl::InternalError(absl::StrCat("fill the daemon's stderr: ", strerror(errno)));
  }
  return absl::OkStatus();
}

void DaemonProcess::ResumeOutput() { paused_ = false; }

std::string DaemonProcess::output() const {
  std::lock_guard lock(output_mu_);
  return output_;
}

}  // namespace testing_support
