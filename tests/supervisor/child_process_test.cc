// ChildProcess against real short-lived programs: the exit status can be read
// before the child is reaped, and reaping afterwards gives the same status;
// commands that cannot be run are refused with the reason.
#include "supervisor/child_process.h"

#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>

#include "base/proc.h"
#include "tests/support/temp_dir.h"

namespace supervisor {

TEST_CASE("child_process: ExitStatus reads the exit without reaping, then Reap frees the pid") {
  auto child = ChildProcess::Spawn({"sh", "-c", "exit 3"});
  REQUIRE(child.ok());
  pollfd p{.fd = child->pidfd(), .events = POLLIN, .revents = 0};
  REQUIRE(poll(&p, 1, 10'000) == 1);
  const pid_t pid = child->pid();

  auto status = child->ExitStatus();
  REQUIRE(status.ok());
  CHECK(status->ShellCode() == 3);
  // Still ours and unreaped: a zombie holds the pid.
  auto stat = base::ReadProcStat(pid);
  REQUIRE(stat.has_value());
  CHECK(stat->state == 'Z');
  CHECK(child->ExitStatus()->ShellCode() == 3);  // reading it again changes nothing

  auto reaped = child->Reap();
  REQUIRE(reaped.ok());
  CHECK(reaped->ShellCode() == 3);
  CHECK_FALSE(base::ReadProcStat(pid).has_value());
}

TEST_CASE("child_process: ExitStatus of a killed child is 128 + the signal") {
  auto child = ChildProcess::Spawn({"sleep", "30"});
  REQUIRE(child.ok());
  CHECK(child->ExitStatus().status().code() == absl::StatusCode::kUnavailable);  // still running
  child->SignalGroup(SIGKILL);
  pollfd p{.fd = child->pidfd(), .events = POLLIN, .revents = 0};
  REQUIRE(poll(&p, 1, 10'000) == 1);
  CHECK(child->ExitStatus()->ShellCode() == 128 + SIGKILL);
  CHECK(child->Reap()->ShellCode() == 128 + SIGKILL);
}

TEST_CASE("child_process: a bare command name found nowhere in PATH is NotFound, naming it") {
  auto child = ChildProcess::Spawn({"sharemgr-no-such-command-anywhere"});
  REQUIRE_FALSE(child.ok());
  CHECK(child.status().code() == absl::StatusCode::kNotFound);
  CHECK(child.status().message() == "sharemgr-no-such-command-anywhere not found in PATH");
}

TEST_CASE(
    "child_process: an executable file that execve refuses fails Spawn with FailedPrecondition: "
    "cannot execute, the path, Exec format error") {
  testing_support::TempDir dir;
  const std::string path = dir.path() + "/not-a-program";
  std::ofstream(path) << "\x7f"
                         "ELF but not really\n";
  REQUIRE(chmod(path.c_str(), 0755) == 0);
  auto child = ChildProcess::Spawn({path});
  REQUIRE_FALSE(child.ok());
  CHECK(child.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(child.status().message() == "cannot execute " + path + ": Exec format error");
}

}  // namespace supervisor
