// A child process in its own process group, with a pidfd for race-free exit
// detection and its stdout/stderr on one pipe.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/unique_fd.h"

namespace supervisor {

struct ChildExit {
  int code = -1;   // exit code, or -1 when killed by a signal
  int signal = 0;  // terminating signal, or 0
  std::string Describe() const;
  // As a shell reports it: the exit code, or 128 + the signal.
  int ShellCode() const { return signal != 0 ? 128 + signal : code; }
};

// Whether the child may exec at once, or waits (forked, in its process group,
// its pidfd valid) until the parent Release()s it: so that whatever must
// watch the program (a watchdog taking its pidfd) is in place before the
// program does anything.
enum class StartGate { kOpen, kHeld };

class ChildProcess {
 public:
  // Starts argv (argv[0] is looked up in PATH). Fails with a clear error when the
  // program cannot be executed; then no process is left behind. The child gets
  // `death_signal` when the thread that spawned it ends (PR_SET_PDEATHSIG; 0:
  // none). Its stdin is `stdin_fd` when given, /dev/null otherwise. kHeld: the
  // child waits before exec until Release() (see StartGate); when the gate
  // closes otherwise (Cancel, this object destroyed, this process dead) it
  // exits 125 without exec.
  static absl::StatusOr<ChildProcess> Spawn(const std::vector<std::string>& argv,
                                            int death_signal = SIGKILL, int stdin_fd = -1,
                                            StartGate gate = StartGate::kOpen);

  ChildProcess(ChildProcess&&) = default;
  ChildProcess& operator=(ChildProcess&&) = default;

  pid_t pid() const { return pid_; }
  // Readable once the child has exited.
  int pidfd() const { return pidfd_.get(); }
  // The read end of the child's stdout+stderr; non-blocking.
  int output_fd() const { return output_.get(); }

  // A held child: lets it exec. Fails, the child reaped and its exit in
  // `exited` (when given), when it never ran the program: the exec failed
  // (127), or it had exited at its gate before it took the go (killed by a
  // watchdog: "exited before release").
  absl::Status Release(ChildExit* exited = nullptr);
  // A held child: never execs; it exits 125 and is reaped here (SIGKILLed if
  // it does not exit within a second: stopped by someone). Its exit; an
  // error when it did not die even after SIGKILL (abandoned, see Abandon).
  absl::StatusOr<ChildExit> Cancel();

  // Signals the child's whole process group. Safe until Reap(): the group id
  // cannot be reused while the leader is unreaped.
  void SignalGroup(int sig) const;

  // Gives up on a child that did not die (stuck in the kernel after SIGKILL):
  // it is no longer owned, so the orphan reaper (share-manager's SIGCHLD
  // handling) reaps it whenever it finally exits.
  void Abandon() &&;

  // Collects the exit status once pidfd() is readable.
  absl::StatusOr<ChildExit> Reap();
  // The exit status once pidfd() is readable, without reaping: the child stays
  // a zombie (its pid and group id held) until Reap(). Reading it is instant;
  // reaping may not be (the kernel then drops the process's /proc entries, one
  // set per thread, which took up to 280 ms for a share-manager on a busy machine).
  absl::StatusOr<ChildExit> ExitStatus() const;

  // True for a process started by Spawn and not reaped yet. An orphan reaper
  // (waitpid on any child) must leave these alone: their owner reaps them
  // through their pidfd and needs their exit status. Call with SpawnMutex()
  // held, so a Spawn cannot slip between the check and the reap.
  static bool IsOwned(pid_t pid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(SpawnMutex());
  static absl::Mutex& SpawnMutex();

 private:
  // Reaps a child that is exiting or should (its gate closed): SIGKILLed
  // when it does not within a few seconds, abandoned when even that fails.
  absl::StatusOr<ChildExit> ReapDead();

  ChildProcess(pid_t pid, base::UniqueFd pidfd, base::UniqueFd output, base::UniqueFd gate,
               base::UniqueFd report, std::string program)
      : pid_(pid),
        pidfd_(std::move(pidfd)),
        output_(std::move(output)),
        gate_(std::move(gate)),
        report_(std::move(report)),
        program_(std::move(program)) {}

  pid_t pid_ = -1;
  base::UniqueFd pidfd_;
  base::UniqueFd output_;
  // A held child only, until Release or Cancel: the gate's parent end (its
  // close without a byte is the child's EOF) and the exec report's read end.
  base::UniqueFd gate_;
  base::UniqueFd report_;
  std::string program_;  // the resolved path, for errors
};

}  // namespace supervisor
