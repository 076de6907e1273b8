// The serving lease's dead-man switch (issue #12): a small process of its own
// that SIGKILLs ganesha once the lease's validity has ended without an
// extension, whatever becomes of share-manager meanwhile.
//
// share-manager fences on its own loop too, but only while it is scheduled:
// SIGSTOPped, its loop stalled, or blocked writing to a full stderr pipe, it
// cannot, while ganesha (in a process group of its own) goes on answering
// NFS writes after etcd has let the next epoch in. The fencer:
//  - is share-manager's own executable run again (`share-manager
//    lease-fencer`): a fresh single-threaded process in a process group of
//    its own, not a fork of this multithreaded one;
//  - holds ganesha's pidfd, passed over a socket (so never another process
//    that got ganesha's pid), armed anew for each ganesha while its child
//    still waits at its start gate, before it execs ganesha;
//  - is extended by the keeper's thread at each renewal, not through the
//    loop, which may be the part that stalls;
//  - keeps the lease's valid_until as an absolute CLOCK_BOOTTIME point (a
//    suspend counts) and SIGKILLs ganesha when it passes;
//  - when the socket ends (share-manager died), SIGKILLs an armed ganesha at
//    once and exits.
// It cannot help when it is frozen with share-manager and ganesha (a whole
// node or pod frozen): see docs/DESIGN-NOTES.md "Serving lease".
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "base/unique_fd.h"
#include "supervisor/child_process.h"
#include "supervisor/event_loop.h"
#include "supervisor/log_forwarder.h"

namespace sharemgr {

// The hidden subcommand that runs the fencer (argv[1]); its channel is stdin.
inline constexpr char kLeaseFencerCommand[] = "lease-fencer";
// The fencer process: returns its exit code. Call first thing in main, before
// any thread starts.
int RunLeaseFencer();

class LeaseFencer {
 public:
  // The fencer is gone or cannot be told (it died, its socket failed): the
  // switch is off, so serving must stop. Loop thread.
  using Failed = std::function<void(const std::string& why)>;

  // Starts `command` (share-manager's: {"/proc/self/exe", kLeaseFencerCommand,
  // a tag naming the share}) with the channel as its stdin. Loop thread.
  static absl::StatusOr<std::unique_ptr<LeaseFencer>> Start(supervisor::EventLoop& loop,
                                                            const std::vector<std::string>& command,
                                                            Failed failed);
  // Stop(1 s) unless stopped.
  ~LeaseFencer();
  LeaseFencer(const LeaseFencer&) = delete;
  LeaseFencer& operator=(const LeaseFencer&) = delete;

  // A new ganesha, held at its start gate (its pidfd is valid before it
  // runs anything), to be SIGKILLed at the valid_until Extend last sent, at
  // once when none was; replaces the one armed before (which is left alone).
  // Loop thread.
  absl::Status Arm(const supervisor::ChildProcess& child) ABSL_LOCKS_EXCLUDED(mu_);
  // The lease's validity now ends at `valid_until` (a BootClock point):
  // renewed, or cut short. Before the first Arm it is only remembered. Any
  // thread: the keeper's tells it at each renewal, so that a stalled loop
  // does not keep renewals from the fencer.
  absl::Status Extend(base::TimePoint valid_until) ABSL_LOCKS_EXCLUDED(mu_);
  // Closes the channel (the fencer SIGKILLs an armed ganesha, then exits) and
  // waits up to `budget` for it to exit, then SIGKILLs it. Its exit status.
  // Loop thread; Extend fails after it.
  absl::StatusOr<supervisor::ChildExit> Stop(base::Duration budget) ABSL_LOCKS_EXCLUDED(mu_);

  pid_t pid() const { return pid_; }

 private:
  LeaseFencer(supervisor::EventLoop& loop, supervisor::ChildProcess child, base::UniqueFd channel,
              Failed failed);
  absl::Status Send(uint32_t kind, base::TimePoint valid_until, int pidfd, pid_t pid)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnReports() ABSL_LOCKS_EXCLUDED(mu_);
  void OnOutput();
  void OnExit();
  void Unwatch();
  void CloseChannel() ABSL_LOCKS_EXCLUDED(mu_);

  // Loop thread only.
  supervisor::EventLoop& loop_;
  std::optional<supervisor::ChildProcess> child_;
  const pid_t pid_;
  Failed failed_;
  supervisor::LineLogger output_;
  uint64_t channel_token_ = 0;
  uint64_t output_token_ = 0;
  uint64_t exit_token_ = 0;

  // The loop's Arm and the keeper's Extend both send; closed once the fencer
  // is stopped or gone.
  absl::Mutex mu_;
  base::UniqueFd channel_ ABSL_GUARDED_BY(mu_);
  bool armed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<base::TimePoint> valid_until_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sharemgr
