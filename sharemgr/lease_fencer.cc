#include "sharemgr/lease_fencer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/fmt_absl.h"

namespace sharemgr {
namespace {

// share-manager -> fencer, one SOCK_SEQPACKET message each.
enum : uint32_t {
  kArm = 1,     // a new ganesha: its pidfd rides along (SCM_RIGHTS)
  kExtend = 2,  // the armed ganesha's new deadline
};
struct Command {
  uint32_t kind = 0;
  int32_t pid = 0;             // for the fencer's report only: the pidfd is what it signals
  int64_t valid_until_ns = 0;  // CLOCK_BOOTTIME
};
// fencer -> share-manager: it SIGKILLed the armed ganesha at its deadline.
struct Report {
  int32_t pid = 0;
  int32_t error = 0;    // errno of pidfd_send_signal, 0 when sent
  int64_t late_ns = 0;  // how long after the deadline; -1: there was none (the lease is over)
};

// A SIGKILLed fencer is gone in well under this.
constexpr base::Duration kKilledExitTime{5000};

int64_t Nanoseconds(base::TimePoint t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// --- the fencer process: single-threaded, system calls only.

int64_t BootNow() {
  timespec ts{};
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// To share-manager's log through the fencer's output pipe. Never blocks: with
// share-manager stopped nobody reads the pipe, and a full one loses the line.
void Say(const char* what) {
  char line[256];
  const int n =
      std::snprintf(line, sizeof(line), "lease-fencer: %s: %s\n", what, std::strerror(errno));
  if (n > 0) [[maybe_unused]]
    auto w = write(STDERR_FILENO, line, static_cast<size_t>(n));
}

class Fencer {
 public:
  // Its exit code.
  int Run() {
    fcntl(STDERR_FILENO, F_SETFL, fcntl(STDERR_FILENO, F_GETFL) | O_NONBLOCK);
    timer_.reset(timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK));
    if (!timer_) return Fatal("timerfd_create");
    for (;;) {
      pollfd fds[2] = {{kChannel, POLLIN, 0}, {timer_.get(), POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return Fatal("poll");
      }
      if (fds[1].revents != 0) {
        uint64_t expirations;
        [[maybe_unused]] auto n = read(timer_.get(), &expirations, sizeof(expirations));
      }
      // Every command first: an extension that arrived before the deadline
      // but is read only after it still counts (it is what etcd granted).
      if (fds[0].revents != 0) {
        if (auto end = ReadCommands()) return *end;
      }
      if (ganesha_ && !fired_ && BootNow() >= valid_until_ns_) Fire();
      SetTimer();
    }
  }

 private:
  static constexpr int kChannel = STDIN_FILENO;

  // The exit code once the channel ended (share-manager is gone) or failed.
  std::optional<int> ReadCommands() {
    for (;;) {
      Command command;
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
      iovec iov{&command, sizeof(command)};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      const ssize_t n = recvmsg(kChannel, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return std::nullopt;
      if (n == 0) {
        // share-manager is gone: nothing will extend the lease, and nothing
        // supervises ganesha any more.
        KillArmed();
        return 0;
      }
      if (n < 0) return Fatal("recvmsg");
      base::UniqueFd passed;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c), sizeof(fd));
          passed.reset(fd);
        }
      }
      if (n != sizeof(command) || (command.kind == kArm && !passed) ||
          (command.kind != kArm && command.kind != kExtend)) {
        errno = EPROTO;
        return Fatal("unexpected message");
      }
      if (command.kind == kArm) {
        ganesha_ = std::move(passed);
        pid_ = command.pid;
        fired_ = false;
      }
      valid_until_ns_ = command.valid_until_ns;
    }
  }

  void Fire() {
    // The clock's zero: no validity at all (the lease lost, or never heard of).
    const int64_t late = valid_until_ns_ > 0 ? BootNow() - valid_until_ns_ : -1;
    fired_ = true;
    const int error = KillArmed();
    // Only now: telling comes after the kill.
    const Report report{.pid = pid_, .error = error, .late_ns = late};
    [[maybe_unused]] auto n = send(kChannel, &report, sizeof(report), MSG_DONTWAIT | MSG_NOSIGNAL);
  }

  // SIGKILLs the armed ganesha, if any; errno of the signal, or 0.
  int KillArmed() {
    if (!ganesha_) return 0;
    if (syscall(SYS_pidfd_send_signal, ganesha_.get(), SIGKILL, nullptr, 0) == 0) return 0;
    return errno == ESRCH ? 0 : errno;  // ESRCH: it had exited already
  }

  void SetTimer() {
    itimerspec spec{};
    if (ganesha_ && !fired_) {
      const int64_t at = std::max<int64_t>(valid_until_ns_, 1);  // 0 would disarm
      spec.it_value.tv_sec = static_cast<time_t>(at / 1'000'000'000);
      spec.it_value.tv_nsec = static_cast<long>(at % 1'000'000'000);
    }
    timerfd_settime(timer_.get(), TFD_TIMER_ABSTIME, &spec, nullptr);
  }

  // Fails safe: without its fencer ganesha must not serve (share-manager
  // sees the exit through its pidfd and fences too).
  int Fatal(const char* what) {
    const int err = errno;
    KillArmed();
    errno = err;
    Say(what);
    return 1;
  }

  base::UniqueFd timer_;
  base::UniqueFd ganesha_;
  pid_t pid_ = 0;
  int64_t valid_until_ns_ = 0;
  bool fired_ = false;
};

}  // namespace

int RunLeaseFencer() { return Fencer().Run(); }

// --- share-manager's side.

absl::StatusOr<std::unique_ptr<LeaseFencer>> LeaseFencer::Start(
    supervisor::EventLoop& loop, const std::vector<std::string>& command, Failed failed) {
  int ends[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  base::UniqueFd ours(ends[0]), theirs(ends[1]);
  // No death signal: when share-manager dies, the fencer must live on long
  // enough to see its channel end and kill ganesha.
  auto child = supervisor::ChildProcess::Spawn(command, /*death_signal=*/0, theirs.get());
  if (!child.ok()) {
    return absl::Status(child.status().code(),
                        absl::StrCat("cannot start the lease fencer: ", child.status().message()));
  }
  theirs.reset();  // the fencer's end lives only in the fencer: its end is ours alone
  fcntl(ours.get(), F_SETFL, O_NONBLOCK);
  spdlog::info("lease fencer pid {} started", child->pid());
  return std::unique_ptr<LeaseFencer>(
      new LeaseFencer(loop, *std::move(child), std::move(ours), std::move(failed)));
}

LeaseFencer::LeaseFencer(supervisor::EventLoop& loop, supervisor::ChildProcess child,
                         base::UniqueFd channel, Failed failed)
    : loop_(loop),
      child_(std::move(child)),
      pid_(child_->pid()),
      failed_(std::move(failed)),
      // It writes only when it fails.
      output_(spdlog::default_logger(), spdlog::level::err),
      channel_(std::move(channel)) {
  absl::MutexLock lock(&mu_);
  channel_token_ = loop_.Watch(channel_.get(), EPOLLIN, [this](uint32_t) { OnReports(); });
  output_token_ = loop_.Watch(child_->output_fd(), EPOLLIN, [this](uint32_t) { OnOutput(); });
  exit_token_ = loop_.Watch(child_->pidfd(), EPOLLIN, [this](uint32_t) { OnExit(); });
}

LeaseFencer::~LeaseFencer() {
  if (child_) Stop(base::Duration(1000)).IgnoreError();
}

void LeaseFencer::Unwatch() {
  for (uint64_t* token : {&channel_token_, &output_token_, &exit_token_}) {
    if (*token != 0) loop_.Unwatch(*token);
    *token = 0;
  }
}

void LeaseFencer::CloseChannel() {
  absl::MutexLock lock(&mu_);
  channel_.reset();
}

absl::Status LeaseFencer::Send(uint32_t kind, base::TimePoint valid_until, int pidfd, pid_t pid) {
  if (!channel_) return absl::FailedPreconditionError("the lease fencer is stopped");
  Command command{.kind = kind, .pid = pid, .valid_until_ns = Nanoseconds(valid_until)};
  iovec iov{&command, sizeof(command)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pidfd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pidfd, sizeof(pidfd));
  }
  ssize_t n;
  do {
    n = sendmsg(channel_.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  // A full socket means the fencer has not read for a long while: it cannot
  // be counted on, and a lost Arm would leave a ganesha unguarded.
  if (n != static_cast<ssize_t>(sizeof(command))) {
    return absl::UnavailableError(absl::StrCat("cannot reach the lease fencer pid ", pid_, ": ",
                                               n < 0 ? std::strerror(errno) : "short write"));
  }
  return absl::OkStatus();
}

absl::Status LeaseFencer::Arm(const supervisor::ChildProcess& child) {
  absl::MutexLock lock(&mu_);
  // No validity heard of yet: nothing allows this ganesha to serve (the
  // clock's zero, long past: the fencer kills at once).
  auto sent = Send(kArm, valid_until_.value_or(base::TimePoint{}), child.pidfd(), child.pid());
  if (!sent.ok()) return sent;
  armed_ = true;
  return absl::OkStatus();
}

absl::Status LeaseFencer::Extend(base::TimePoint valid_until) {
  absl::MutexLock lock(&mu_);
  if (valid_until_ == valid_until) return absl::OkStatus();
  valid_until_ = valid_until;
  if (!armed_) return absl::OkStatus();
  return Send(kExtend, valid_until, -1, 0);
}

void LeaseFencer::OnReports() {
  Report report;
  const auto next = [&] {
    absl::MutexLock lock(&mu_);
    return channel_ && recv(channel_.get(), &report, sizeof(report), MSG_DONTWAIT) ==
                           static_cast<ssize_t>(sizeof(report));
  };
  while (next()) {
    const auto late =
        std::chrono::duration_cast<base::Duration>(std::chrono::nanoseconds(report.late_ns));
    if (report.error == 0 && report.late_ns < 0) {
      spdlog::error("lease fencer SIGKILLed ganesha pid {}: the serving lease is over", report.pid);
    } else if (report.error == 0) {
      spdlog::error(
          "lease fencer SIGKILLed ganesha pid {} {} after the serving lease's validity ended "
          "without an extension",
          report.pid, base::FormatDuration(late));
    } else {
      spdlog::error("lease fencer could not SIGKILL ganesha pid {} at the lease's end: {}",
                    report.pid, std::strerror(report.error));
    }
  }
}

void LeaseFencer::OnOutput() {
  char buf[1024];
  ssize_t n;
  while (child_ && (n = read(child_->output_fd(), buf, sizeof(buf))) > 0) {
    output_.Append(std::string_view(buf, static_cast<size_t>(n)));
  }
}

void LeaseFencer::OnExit() {
  OnOutput();
  output_.Flush();
  OnReports();
  Unwatch();
  auto exit = child_->Reap();
  const std::string how = exit.ok() ? exit->Describe() : std::string(exit.status().message());
  child_.reset();
  CloseChannel();
  failed_(absl::StrCat("the lease fencer pid ", pid_, " ", how));
}

absl::StatusOr<supervisor::ChildExit> LeaseFencer::Stop(base::Duration budget) {
  if (!child_) return absl::FailedPreconditionError("the lease fencer is stopped");
  Unwatch();
  CloseChannel();  // its end of the channel: the fencer kills an armed ganesha and exits
  pollfd exited{child_->pidfd(), POLLIN, 0};
  if (poll(&exited, 1, static_cast<int>(budget.count())) <= 0) {
    spdlog::error("lease fencer pid {} did not exit within {} of its channel's end; SIGKILL", pid_,
                  base::FormatDuration(budget));
    child_->SignalGroup(SIGKILL);
    if (poll(&exited, 1, static_cast<int>(kKilledExitTime.count())) <= 0) {
      // Stuck in the kernel: the orphan reaper gets it whenever it ends.
      std::move(*child_).Abandon();
      child_.reset();
      return absl::DeadlineExceededError(
          absl::StrCat("lease fencer pid ", pid_, " did not exit after SIGKILL"));
    }
  }
  OnOutput();
  output_.Flush();
  auto exit = child_->Reap();
  child_.reset();
  return exit;
}

}  // namespace sharemgr
