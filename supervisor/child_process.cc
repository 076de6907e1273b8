#include "supervisor/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/clock.h"

extern char** environ;

namespace supervisor {
namespace {

absl::Status Errno(const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<std::string> ResolveExecutable(const std::string& name) {
  auto executable = [](const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return name;
    return absl::NotFoundError(absl::StrCat(name, " is not an executable file"));
  }
  const char* path = std::getenv("PATH");
  for (auto dir : absl::StrSplit(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin", ':')) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (executable(candidate)) return candidate;
  }
  return absl::NotFoundError(absl::StrCat(name, " not found in PATH"));
}

// A held child whose gate closed without a Release: it never ran the program.
constexpr int kNeverReleased = 125;
// A cancelled child exits at once; one that does not (stopped by someone) is SIGKILLed.
constexpr base::Duration kCancelExitTime{1000};
// A SIGKILLed child (or one whose end of the gate closed: it is exiting) is
// gone in well under this, unless stuck in the kernel.
constexpr base::Duration kKilledExitTime{5000};

// Runs in the forked child: only async-signal-safe calls until exec. A held
// child gets the gate's two ends: it waits on `gate`, and closes the
// parent's (else its own copy would keep it from ever seeing EOF).
[[noreturn]] void ExecChild(const char* path, char* const* argv, int output, int devnull,
                            int report, pid_t parent, int death_signal, int stdin_fd, int gate,
                            int parent_gate) {
  setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  // If the share-manager dies, ganesha must not outlive it unsupervised; a
  // filesystem check gets SIGTERM instead, so it stops at a safe point.
  prctl(PR_SET_PDEATHSIG, death_signal);
  if (getppid() != parent) _exit(127);
  dup2(stdin_fd >= 0 ? stdin_fd : devnull, STDIN_FILENO);
  dup2(output, STDOUT_FILENO);
  dup2(output, STDERR_FILENO);
  if (gate >= 0) {
    close(parent_gate);
    // Only the parent's byte lets it run; EOF (its end closed: cancelled, or
    // the parent died) means never.
    char go = 0;
    ssize_t n;
    do {
      n = read(gate, &go, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1) _exit(kNeverReleased);
    // The parent waits for this: without it, a child killed at the gate
    // after the go was sent would look released.
    [[maybe_unused]] auto acked = write(gate, &go, 1);
  }
  execve(path, argv, environ);
  const int err = errno;
  [[maybe_unused]] auto n = write(report, &err, sizeof(err));
  _exit(127);
}

ABSL_CONST_INIT absl::Mutex spawn_mu(absl::kConstInit);

// The exit of an exited child; `flags`: WNOWAIT to leave it unreaped.
absl::StatusOr<ChildExit> Wait(int pidfd, int flags) {
  siginfo_t info{};
  if (waitid(P_PIDFD, static_cast<id_t>(pidfd), &info, WEXITED | WNOHANG | flags) != 0) {
    return Errno("waitid");
  }
  if (info.si_pid == 0) return absl::UnavailableError("child has not exited");
  ChildExit exit;
  if (info.si_code == CLD_EXITED) {
    exit.code = info.si_status;
  } else {
    exit.signal = info.si_status;
  }
  return exit;
}

// Pids spawned here and not reaped yet.
std::set<pid_t>& OwnedPids() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ChildProcess::SpawnMutex()) {
  static std::set<pid_t> pids;
  return pids;
}

void Disown(pid_t pid) {
  absl::MutexLock lock(&ChildProcess::SpawnMutex());
  OwnedPids().erase(pid);
}

// Waits up to `timeout` for the pidfd to turn readable (the child exited),
// through signals.
bool AwaitExit(int pidfd, base::Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd exited{pidfd, POLLIN, 0};
    const int n = poll(&exited, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

// Waits until the child has exec'd (the report's write end closed with it) or
// exited, or reports why execve failed: then the child is reaped.
absl::Status AwaitExec(pid_t pid, int report, const std::string& path) {
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(report, &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  if (n != sizeof(child_errno)) return absl::OkStatus();
  waitpid(pid, nullptr, 0);
  Disown(pid);
  return absl::FailedPreconditionError(
      absl::StrCat("cannot execute ", path, ": ", std::strerror(child_errno)));
}

}  // namespace

absl::Mutex& ChildProcess::SpawnMutex() { return spawn_mu; }

bool ChildProcess::IsOwned(pid_t pid) { return OwnedPids().contains(pid); }

void ChildProcess::Abandon() && {
  Disown(pid_);
  pid_ = -1;
}

std::string ChildExit::Describe() const {
  if (signal != 0) return absl::StrCat("killed by signal ", signal, " (", strsignal(signal), ")");
  return absl::StrCat("exited with code ", code);
}

absl::StatusOr<ChildProcess> ChildProcess::Spawn(const std::vector<std::string>& argv,
                                                 int death_signal, int stdin_fd, StartGate gate) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  auto path = ResolveExecutable(argv[0]);
  if (!path.ok()) return path.status();
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  int out[2], report[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Errno("pipe2");
  base::UniqueFd out_read(out[0]), out_write(out[1]);
  if (pipe2(report, O_CLOEXEC) != 0) return Errno("pipe2");
  base::UniqueFd report_read(report[0]), report_write(report[1]);
  base::UniqueFd devnull(open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!devnull) return Errno("open /dev/null");
  // A socket, not a pipe: a Release to a child killed meanwhile gets EPIPE,
  // never SIGPIPE. CLOEXEC: no other program inherits either end.
  base::UniqueFd gate_parent, gate_child;
  if (gate == StartGate::kHeld) {
    int ends[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) return Errno("socketpair");
    gate_parent.reset(ends[0]);
    gate_child.reset(ends[1]);
  }

  const pid_t parent = getpid();
  // Registered before any reaper can see it exit.
  SpawnMutex().Lock();
  const pid_t pid = fork();
  if (pid < 0) {
    absl::Status forked = Errno("fork");
    SpawnMutex().Unlock();
    return forked;
  }
  if (pid == 0) {
    ExecChild(path->c_str(), args.data(), out_write.get(), devnull.get(), report_write.get(),
              parent, death_signal, stdin_fd, gate_child ? gate_child.get() : -1,
              gate_parent.get());
  }
  OwnedPids().insert(pid);
  SpawnMutex().Unlock();
  setpgid(pid, pid);  // also done in the child; whichever runs first wins the race
  out_write.reset();
  report_write.reset();
  gate_child.reset();
  // A held child execs only once released: its report is read then.
  if (gate == StartGate::kOpen) {
    if (auto execd = AwaitExec(pid, report_read.get(), *path); !execd.ok()) return execd;
    report_read.reset();
  }

  base::UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) {
    const auto status = Errno("pidfd_open");
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    Disown(pid);
    return status;
  }
  fcntl(out_read.get(), F_SETFL, O_NONBLOCK);
  return ChildProcess(pid, std::move(pidfd), std::move(out_read), std::move(gate_parent),
                      std::move(report_read), *std::move(path));
}

absl::Status ChildProcess::Release(ChildExit* exited) {
  if (!gate_) return absl::FailedPreconditionError("the child is not held");
  const char go = 1;
  ssize_t n;
  do {
    n = send(gate_.get(), &go, 1, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  // Its acknowledgement: it took the go and goes on to exec. Without one
  // (EPIPE, a reset, EOF) it was killed at the gate (by a watchdog, before
  // it ran anything): not a start of the program.
  char ack = 0;
  while (n == 1 && (n = read(gate_.get(), &ack, 1)) < 0 && errno == EINTR) {
  }
  gate_.reset();
  if (n != 1) {
    report_.reset();
    const pid_t pid = pid_;
    auto exit = ReapDead();
    if (!exit.ok()) return exit.status();
    if (exited) *exited = *exit;
    return absl::FailedPreconditionError(
        absl::StrCat(program_, " pid ", pid, " exited before release: ", exit->Describe()));
  }
  const auto execd = AwaitExec(pid_, report_.get(), program_);
  report_.reset();
  if (!execd.ok()) {
    pid_ = -1;  // reaped
    if (exited) *exited = ChildExit{.code = 127};
  }
  return execd;
}

absl::StatusOr<ChildExit> ChildProcess::Cancel() {
  if (!gate_) return absl::FailedPreconditionError("the child is not held");
  gate_.reset();
  report_.reset();
  if (!AwaitExit(pidfd_.get(), kCancelExitTime)) SignalGroup(SIGKILL);
  return ReapDead();
}

absl::StatusOr<ChildExit> ChildProcess::ReapDead() {
  if (!AwaitExit(pidfd_.get(), kKilledExitTime)) {
    SignalGroup(SIGKILL);
    if (!AwaitExit(pidfd_.get(), kKilledExitTime)) {
      // Stuck in the kernel: not left owned for ever (a zombie the orphan
      // reaper would stop at); it reaps it whenever it finally exits.
      const pid_t pid = pid_;
      std::move(*this).Abandon();
      return absl::DeadlineExceededError(absl::StrCat(
          program_, " pid ", pid, " did not exit within ", base::FormatDuration(kKilledExitTime),
          " of SIGKILL; left to the orphan reaper"));
    }
  }
  return Reap();
}

void ChildProcess::SignalGroup(int sig) const {
  if (pid_ > 0) kill(-pid_, sig);
}

absl::StatusOr<ChildExit> ChildProcess::Reap() {
  auto exit = Wait(pidfd_.get(), 0);
  if (!exit.ok()) return exit;
  Disown(pid_);
  pid_ = -1;
  return exit;
}

absl::StatusOr<ChildExit> ChildProcess::ExitStatus() const { return Wait(pidfd_.get(), WNOWAIT); }

}  // namespace supervisor
