// Runs a program to completion with a time limit, capturing its output: for
// the short helpers share-manager calls (mkfs, e2fsck, resize2fs, ...) and
// for tests. What happens at the limit is the caller's choice: a helper that
// leaves nothing half-done is killed with its group; a filesystem check or
// mkfs is only asked to stop (SIGTERM) and waited for, because SIGKILL can
// leave the filesystem half-written.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "base/unique_fd.h"

namespace supervisor {

// A stop request that another thread gives to whoever runs programs or waits
// with it. It stays requested once given. Request() and requested() are
// thread-safe; fd() is readable (for poll) once requested.
class StopSignal {
 public:
  StopSignal();
  StopSignal(StopSignal&&) = default;
  StopSignal& operator=(StopSignal&&) = default;

  void Request() const;
  bool requested() const;
  int fd() const { return fd_.get(); }

 private:
  base::UniqueFd fd_;
};

enum class AtTimeout {
  // SIGKILL the program's group: for helpers that leave nothing half-done
  // (resize2fs, dd). A program the kernel holds (a read stuck in D state)
  // is abandoned to the orphan reaper after a short grace, so the caller returns.
  kKill,
  // SIGTERM the group once and wait for the program to exit, however long it
  // takes: e2fsck and mkfs stop at a safe point.
  kTerminate,
};

struct RunOptions {
  std::chrono::milliseconds timeout{30'000};
  AtTimeout at_timeout = AtTimeout::kKill;
  // When requested: SIGTERM the group once and wait for the program to exit
  // (never SIGKILL); when already requested, the program is not started.
  const StopSignal* stop = nullptr;
};

struct ProgramResult {
  // Exit code, 128+signal when killed, -1 when it could not be started (or
  // was left behind after SIGKILL because it did not die).
  int exit_code = -1;
  bool timed_out = false;
  bool stopped = false;  // a stop request reached it, or kept it from starting
  std::string output;    // stdout and stderr, interleaved
  std::chrono::milliseconds elapsed{0};
};

ProgramResult RunProgram(const std::vector<std::string>& argv, const RunOptions& options);

// Killed at the timeout.
inline ProgramResult RunProgram(const std::vector<std::string>& argv,
                                std::chrono::milliseconds timeout) {
  return RunProgram(argv, RunOptions{.timeout = timeout});
}

}  // namespace supervisor
