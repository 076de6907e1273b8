// ChildProcess against real short-lived programs: the exit status can be read
// before the child is reaped, and reaping afterwards gives the same status;
// commands that cannot be run are refused with the reason.
#include "supervisor/child_process.h"

#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>

#include "base/proc.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_for.h"

namespace supervisor {
namespace {

using std::chrono::milliseconds;

// The program a process runs now (/proc/<pid>/exe).
std::string ExeOf(pid_t pid) {
  std::error_code error;
  return std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", error).string();
}

// Waits for the child's exit, unreaped.
bool Exited(int pidfd) {
  pollfd p{.fd = pidfd, .events = POLLIN, .revents = 0};
  return poll(&p, 1, 10'000) == 1;
}

// Whether `pid` is a child of ours (a zombie included): false once reaped,
// also when the pid was reused since by some other process.
bool OurChild(pid_t pid) {
  const auto stat = base::ReadProcStat(pid);
  return stat.has_value() && stat->ppid == getpid();
}

// A held `sh` that creates `ran` once it runs, in `dir`.
struct HeldShell {
  testing_support::TempDir dir;
  std::string ran = dir.path() + "/ran";
  std::optional<ChildProcess> child = testing_support::RequireOk(
      ChildProcess::Spawn({"sh", "-c", "touch " + ran}, SIGKILL, -1, StartGate::kHeld));
  const pid_t pid = child->pid();
  bool Ran() const { return std::filesystem::exists(ran); }
};

}  // namespace

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
  CHECK_FALSE(OurChild(pid));
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

TEST_CASE(
    "child_process: a held child runs nothing until Release: it is still this program's image, "
    "then it runs its own") {
  HeldShell held;
  CHECK(held.child->pidfd() >= 0);
  CHECK(testing_support::HoldsFor([&] { return !held.Ran(); }, milliseconds(300)));
  CHECK(ExeOf(held.pid) == ExeOf(getpid()));
  CHECK(getpgid(held.pid) == held.pid);  // in its own group already: SignalGroup reaches it
  REQUIRE(held.child->Release().ok());
  REQUIRE(Exited(held.child->pidfd()));
  CHECK(held.child->Reap()->ShellCode() == 0);
  CHECK(held.Ran());
}

TEST_CASE("child_process: a cancelled held child never runs its program and exits 125") {
  HeldShell held;
  const auto exit = held.child->Cancel();
  REQUIRE(exit.ok());
  CHECK(exit->ShellCode() == 125);
  CHECK_FALSE(held.Ran());
  CHECK_FALSE(OurChild(held.pid));  // reaped
}

TEST_CASE(
    "child_process: a held child whose parent's end of the gate closes (the parent gone) exits "
    "125 without running its program") {
  HeldShell held;
  // Its pidfd outlives the ChildProcess, to see the exit.
  const base::UniqueFd pidfd(fcntl(held.child->pidfd(), F_DUPFD_CLOEXEC, 0));
  held.child.reset();  // every descriptor of the parent's closed
  REQUIRE(Exited(pidfd.get()));
  siginfo_t info{};
  REQUIRE(waitid(P_PIDFD, static_cast<id_t>(pidfd.get()), &info, WEXITED) == 0);
  CHECK(info.si_pid == held.pid);
  CHECK(info.si_code == CLD_EXITED);
  CHECK(info.si_status == 125);
  CHECK_FALSE(held.Ran());
}

TEST_CASE("child_process: a held child that execve refuses fails Release: cannot execute") {
  testing_support::TempDir dir;
  const std::string path = dir.path() + "/not-a-program";
  std::ofstream(path) << "\x7f"
                         "ELF but not really\n";
  REQUIRE(chmod(path.c_str(), 0755) == 0);
  auto child = ChildProcess::Spawn({path}, SIGKILL, -1, StartGate::kHeld);
  REQUIRE(child.ok());  // it has not tried yet
  const pid_t pid = child->pid();
  const auto released = child->Release();
  CHECK(released.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(released.message() == "cannot execute " + path + ": Exec format error");
  CHECK_FALSE(OurChild(pid));  // reaped
}

TEST_CASE(
    "child_process: a held child killed at its gate (by a watchdog) before Release fails "
    "Release: exited before release, reaped, its exit told, the program never run") {
  HeldShell held;
  REQUIRE(kill(held.pid, SIGKILL) == 0);
  REQUIRE(Exited(held.child->pidfd()));
  ChildExit exit;
  const auto released = held.child->Release(&exit);
  CHECK(released.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(
      released.message().find("exited before release: killed by signal 9") != std::string::npos,
      released.message());
  CHECK(exit.signal == SIGKILL);
  CHECK_FALSE(OurChild(held.pid));
  CHECK_FALSE(held.Ran());
}

TEST_CASE(
    "child_process: a cancelled held child that is stopped (it cannot exit) is SIGKILLed and "
    "reaped") {
  HeldShell held;
  REQUIRE(kill(held.pid, SIGSTOP) == 0);
  REQUIRE(testing_support::WaitFor(
      [&] {
        const auto stat = base::ReadProcStat(held.pid);
        return stat.has_value() && stat->state == 'T';
      },
      milliseconds(10'000)));
  const auto exit = held.child->Cancel();
  REQUIRE(exit.ok());
  CHECK(exit->signal == SIGKILL);
  CHECK_FALSE(OurChild(held.pid));
  CHECK_FALSE(held.Ran());
}

}  // namespace supervisor
