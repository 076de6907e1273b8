#include "supervisor/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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

// Runs in the forked child: only async-signal-safe calls until exec.
[[noreturn]] void ExecChild(const char* path, char* const* argv, int output, int devnull,
                            int report, pid_t parent, int death_signal, int stdin_fd) {
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
                                                 int death_signal, int stdin_fd) {
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
              parent, death_signal, stdin_fd);
  }
  OwnedPids().insert(pid);
  SpawnMutex().Unlock();
  setpgid(pid, pid);  // also done in the child; whichever runs first wins the race
  out_write.reset();
  report_write.reset();

  int child_errno = 0;
  ssize_t n;
  do {
    n = read(report_read.get(), &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  if (n == sizeof(child_errno)) {
    waitpid(pid, nullptr, 0);
    Disown(pid);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot execute ", *path, ": ", std::strerror(child_errno)));
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
  return ChildProcess(pid, std::move(pidfd), std::move(out_read));
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
