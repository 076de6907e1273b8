// Runs a real `share-manager daemon` (and so a real ganesha.nfsd) for a test
// or benchmark: free loopback ports, a private temp dir, its log captured,
// and everything it started killed and removed afterwards, pass or fail.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "base/loopback_port.h"
#include "sharemanager/v1/sharemanager.grpc.pb.h"
#include "supervisor/child_process.h"
#include "supervisor/run_program.h"

namespace testing_support {

using std::chrono::milliseconds;

// The share-manager binary under test (set by the build).
std::string ShareManagerBinary();

// Live processes (not zombies) whose command line contains `text`, e.g. a
// daemon's state dir: its ganesha and its lease fencer name it.
std::vector<pid_t> ProcessesMentioning(const std::string& text);

// Runs a command to completion (30 s at most), capturing stdout+stderr.
inline supervisor::ProgramResult RunCommand(const std::vector<std::string>& argv,
                                            milliseconds timeout = milliseconds(30'000)) {
  return supervisor::RunProgram(argv, timeout);
}

struct DaemonSpec {
  std::string volume = "pvc-test";
  // Fast-test defaults; tests append or override with extra flags.
  std::vector<std::string> extra_flags;
  bool wait_until_serving = true;
  // How --export-dir is spelled on the command line, given the real directory
  // (e.g. with a trailing slash); the directory as it is when unset.
  std::function<std::string(const std::string& export_dir)> spell_export_dir;
  // No --export-dir: the daemon's default /export/<volume>, as longhorn-manager
  // starts it (the test removes that directory itself).
  bool default_export_dir = false;
  // Flags before the `daemon` command, e.g. Longhorn's "--debug".
  std::vector<std::string> global_flags;
  // Runs the daemon under this command, e.g. {"setpriv", "--bounding-set=-sys_resource", "--"}.
  std::vector<std::string> wrapper;
  // The address NFS, gRPC and health listen on, and the helpers here call:
  // a test network namespace's own (with `wrapper` entering it) instead of loopback.
  std::string address = "127.0.0.1";
};

class DaemonProcess {
 public:
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(DaemonSpec spec = {});
  ~DaemonProcess();
  DaemonProcess(const DaemonProcess&) = delete;
  DaemonProcess& operator=(const DaemonProcess&) = delete;

  const std::string& addr() const { return addr_; }
  // The address its servers listen on (DaemonSpec::address).
  const std::string& address() const { return address_; }
  // The plaintext health-only port (--health-listen; extra_flags may override it).
  const std::string& health_addr() const { return health_addr_; }
  uint16_t nfs_port() const { return nfs_port_; }
  const std::string& volume() const { return volume_; }
  std::string pseudo_path() const { return "/" + volume_; }
  const std::string& export_dir() const { return export_dir_; }
  const std::string& state_dir() const { return state_dir_; }
  pid_t pid() const { return child_ ? child_->pid() : -1; }

  absl::StatusOr<sharemanager::v1::ShareStatus> Status(
      milliseconds timeout = milliseconds(2000)) const;
  // Polls GetStatus until `done` holds; the last status or an error after `timeout`.
  absl::StatusOr<sharemanager::v1::ShareStatus> WaitFor(
      const std::function<bool(const sharemanager::v1::ShareStatus&)>& done, milliseconds timeout,
      const std::string& what);
  absl::StatusOr<sharemanager::v1::ShareStatus> WaitServing(
      milliseconds timeout = milliseconds(15'000));
  // grpc.health.v1 Check: SERVING or not, or an error.
  absl::StatusOr<bool> HealthServing(const std::string& service,
                                     milliseconds timeout = milliseconds(2000)) const;

  // Through NFS, retrying while ganesha is (re)starting, repairing or in grace.
  absl::Status WriteEventually(const std::string& path, const std::string& data,
                               milliseconds timeout = milliseconds(20'000)) const;
  absl::StatusOr<std::string> ReadEventually(const std::string& path,
                                             milliseconds timeout = milliseconds(20'000)) const;

  void Signal(int sig) const;
  // Waits for the daemon to exit: its exit code, or 128+signal.
  absl::StatusOr<int> WaitExit(milliseconds timeout);
  bool exited() const { return exit_code_.has_value(); }

  // Everything the daemon logged so far.
  std::string output() const;
  // Stands in for a stderr that nobody reads: stops reading the daemon's
  // output and fills the pipe (with lines "#filler"), so that its next log
  // write blocks. ResumeOutput drains it again (the filler lands in output()).
  absl::Status FillOutputPipe();
  void ResumeOutput();
  std::unique_ptr<sharemanager::v1::ShareManager::Stub> Stub() const;

 private:
  DaemonProcess() = default;
  void KillLeftovers();
  bool UnmountLeftovers();

  std::string dir_, export_dir_, state_dir_, address_, addr_, health_addr_, volume_;
  uint16_t nfs_port_ = 0;
  std::optional<supervisor::ChildProcess> child_;
  std::optional<int> exit_code_;
  mutable std::mutex output_mu_;
  std::string output_;
  std::atomic<bool> stop_reader_{false};
  // Held by the reader while it reads; paused_ keeps it from reading.
  std::mutex read_mu_;
  std::atomic<bool> paused_{false};
  std::atomic<bool> output_complete_{false};  // the reader saw the pipe's end
  std::thread reader_;
};

}  // namespace testing_support
