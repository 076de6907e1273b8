#include "supervisor/run_program.h"

#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "supervisor/child_process.h"

namespace supervisor {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long a SIGKILLed program may take to die before it is abandoned to the
// orphan reaper: only a process stuck in the kernel takes longer.
constexpr milliseconds kKillGrace(2000);

// False once the pipe is at end of file (every writer closed it).
bool DrainInto(int fd, std::string& out) {
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return n != 0;
}

int PollMs(milliseconds left) {
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60'000));
}

}  // namespace

StopSignal::StopSignal() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!fd_) {
    // Only fails when the process is out of descriptors or memory.
    spdlog::critical("eventfd: {}", std::strerror(errno));
    std::abort();
  }
}

void StopSignal::Request() const {
  const uint64_t one = 1;
  (void)!write(fd_.get(), &one, sizeof(one));
}

bool StopSignal::requested() const {
  pollfd p{fd_.get(), POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

ProgramResult RunProgram(const std::vector<std::string>& argv, const RunOptions& options) {
  ProgramResult result;
  const auto start = Clock::now();
  if (options.stop != nullptr && options.stop->requested()) {
    result.stopped = true;
    result.output = "not started: a stop was requested";
    return result;
  }
  // A program that must never be SIGKILLed gets SIGTERM if share-manager dies.
  auto child =
      ChildProcess::Spawn(argv, options.at_timeout == AtTimeout::kTerminate ? SIGTERM : SIGKILL);
  if (!child.ok()) {
    result.output = std::string(child.status().message());
    return result;
  }
  const auto deadline = start + options.timeout;
  bool terminated = false;  // SIGTERM goes to the group once
  std::optional<Clock::time_point> killed_at;
  auto terminate = [&] {
    if (!terminated && !killed_at) child->SignalGroup(SIGTERM);
    terminated = true;
  };
  int output_fd = child->output_fd();
  for (;;) {
    const auto now = Clock::now();
    if (!result.timed_out && now >= deadline) {
      result.timed_out = true;
      if (options.at_timeout == AtTimeout::kKill) {
        child->SignalGroup(SIGKILL);
        killed_at = now;
      } else {
        terminate();
      }
    }
    if (killed_at && now - *killed_at >= kKillGrace) {
      spdlog::warn("{} (pid {}) did not die {} ms after SIGKILL; leaving it to be reaped later",
                   argv[0], child->pid(), kKillGrace.count());
      DrainInto(child->output_fd(), result.output);
      std::move(*child).Abandon();
      result.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
      return result;
    }
    const bool watch_stop = options.stop != nullptr && !terminated && !killed_at;
    pollfd fds[3] = {{child->pidfd(), POLLIN, 0},
                     {output_fd, POLLIN, 0},
                     {watch_stop ? options.stop->fd() : -1, POLLIN, 0}};
    int wait_ms = -1;  // SIGTERMed after the timeout: wait for the exit however long
    if (killed_at) {
      wait_ms = PollMs(kKillGrace - std::chrono::duration_cast<milliseconds>(now - *killed_at));
    } else if (!result.timed_out) {
      wait_ms = PollMs(std::chrono::duration_cast<milliseconds>(deadline - now));
    }
    poll(fds, 3, wait_ms);
    if (output_fd >= 0 && !DrainInto(output_fd, result.output)) output_fd = -1;
    if (fds[0].revents & POLLIN) break;
    if (fds[2].revents & POLLIN) {
      result.stopped = true;
      terminate();
    }
  }
  auto exit = child->Reap();
  DrainInto(child->output_fd(), result.output);
  if (exit.ok()) result.exit_code = exit->ShellCode();
  result.elapsed = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  return result;
}

}  // namespace supervisor
