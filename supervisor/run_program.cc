#include "supervisor/run_program.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "supervisor/child_process.h"

namespace supervisor {
namespace {

void DrainInto(int fd, std::string& out) {
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
}

}  // namespace

ProgramResult RunProgram(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  ProgramResult result;
  const auto start = Clock::now();
  auto child = ChildProcess::Spawn(argv);
  if (!child.ok()) {
    result.output = std::string(child.status().message());
    return result;
  }
  const auto deadline = start + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 && !result.timed_out) {
      result.timed_out = true;
      child->SignalGroup(SIGKILL);
    }
    pollfd fds[2] = {{child->output_fd(), POLLIN, 0}, {child->pidfd(), POLLIN, 0}};
    poll(fds, 2, result.timed_out ? 1000 : static_cast<int>(std::max<int64_t>(left.count(), 0)));
    DrainInto(child->output_fd(), result.output);
    if (fds[1].revents & POLLIN) break;
  }
  auto exit = child->Reap();
  DrainInto(child->output_fd(), result.output);
  if (exit.ok()) result.exit_code = exit->ShellCode();
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return result;
}

}  // namespace supervisor
