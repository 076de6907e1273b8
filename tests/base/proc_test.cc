#include "base/proc.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>

#include "base/unique_fd.h"

namespace base {
namespace {

// What `ls -l /proc/self/fd` prints in a child forked and exec'd now: the
// files it inherited, with their targets.
std::string FdsOfAnExecdChild() {
  int out[2];
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  UniqueFd out_read(out[0]), out_write(out[1]);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(out_write.get(), STDOUT_FILENO);
    execl("/bin/ls", "ls", "-l", "/proc/self/fd", nullptr);
    _exit(127);
  }
  out_write.reset();
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(out_read.get(), buf, sizeof(buf))) > 0;)
    text.append(buf, static_cast<size_t>(n));
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status));
  return text;
}

TEST_CASE("proc: files read from /proc never leak into a child another thread execs meanwhile") {
  // The pod runtime reads /proc on one thread while another spawns pods: a
  // /proc fd open at the fork, without O_CLOEXEC, would outlive the exec.
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop) {
      (void)ReadProcStat(getpid());
      (void)ProcessChildren(getpid());
      (void)BootId();
    }
  });
  std::string leaked;
  // The reader holds one of its files open most of the time: a leak shows
  // within a few children.
  for (int i = 0; i < 200 && leaked.empty(); ++i) {
    const std::string fds = FdsOfAnExecdChild();
    for (const char* name : {"/stat", "/children", "boot_id"}) {
      if (fds.find(name) != std::string::npos) leaked = fds;
    }
  }
  stop = true;
  reader.join();
  CHECK_MESSAGE(leaked.empty(), leaked);
}

TEST_CASE("proc: a process's stat, children and the boot id read as before") {
  const auto self = ReadProcStat(getpid());
  REQUIRE(self.has_value());
  CHECK(self->ppid == getppid());
  CHECK(self->pgrp == getpgrp());
  CHECK(self->start_ticks > 0);
  CHECK(ProcessAlive(getpid(), self->start_ticks));
  CHECK_FALSE(ProcessAlive(getpid(), self->start_ticks + 1));  // a reused pid

  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    execl("/bin/sleep", "sleep", "30", nullptr);
    _exit(127);
  }
  const auto children = ProcessChildren(getpid());
  CHECK(std::find(children.begin(), children.end(), child) != children.end());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);

  const auto boot = BootId();
  REQUIRE(boot.has_value());
  CHECK(boot->size() == 36);  // a UUID, without its newline
}

TEST_CASE("proc: a process's usage counts its resident memory, threads, descriptors and CPU time") {
  const auto before = ReadProcessUsage(getpid());
  REQUIRE(before.has_value());
  CHECK(before->threads >= 1);
  CHECK(before->open_fds >= 3);  // stdin, stdout, stderr at least

  // 64 MiB touched, a thread started, four descriptors opened, CPU burnt:
  // each figure must move by at least that much.
  constexpr size_t kTouched = 64 << 20;
  std::string memory(kTouched, 'x');
  int fds[2][2];
  REQUIRE(pipe2(fds[0], O_CLOEXEC) == 0);
  REQUIRE(pipe2(fds[1], O_CLOEXEC) == 0);
  UniqueFd a(fds[0][0]), b(fds[0][1]), c(fds[1][0]), d(fds[1][1]);
  std::atomic<bool> stop{false};
  std::thread spinner([&stop] {
    while (!stop.load()) {
    }
  });
  timespec cpu_start{}, cpu_now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_start);
  do {
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_now);
  } while (cpu_now.tv_sec - cpu_start.tv_sec < 1);
  const auto after = ReadProcessUsage(getpid());
  stop = true;
  spinner.join();
  REQUIRE(after.has_value());
  CHECK(after->rss_bytes >= before->rss_bytes + kTouched / 2);
  CHECK(after->threads >= before->threads + 1);
  CHECK(after->open_fds >= before->open_fds + 4);
  CHECK(after->cpu_seconds >= before->cpu_seconds + 0.5);
  CHECK(memory[kTouched - 1] == 'x');

  // A zombie uses nothing: it is no process to report on.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  siginfo_t info{};
  REQUIRE(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT) == 0);
  CHECK_FALSE(ReadProcessUsage(child).has_value());
  waitpid(child, nullptr, 0);
  CHECK_FALSE(ReadProcessUsage(child).has_value());
}

}  // namespace

TEST_CASE(
    "proc: a command line without the flag and value is another process's, an empty or unreadable "
    "one says nothing") {
  using namespace std::string_literals;
  const std::string flag = "--pod-uid", uid = "abc";
  CHECK(CmdlineCarries("sh\0--pod-uid\0abc\0"s, flag, uid) == CmdlineMatch::kYes);
  CHECK(CmdlineCarries("--pod-uid\0abc\0"s, flag, uid) == CmdlineMatch::kYes);
  // Present and without the pair: a stranger.
  CHECK(CmdlineCarries("sleep\0"
                       "60\0"s,
                       flag, uid) == CmdlineMatch::kNo);
  CHECK(CmdlineCarries("sh\0--pod-uid\0abcd\0"s, flag, uid) == CmdlineMatch::kNo);
  CHECK(CmdlineCarries("sh\0x--pod-uid\0abc\0"s, flag, uid) == CmdlineMatch::kNo);
  CHECK(CmdlineCarries("sh\0--pod-uid\0xabc\0"s, flag, uid) == CmdlineMatch::kNo);
  // Mid-execve the kernel shows an empty command line: unknown, not a stranger.
  CHECK(CmdlineCarries(""s, flag, uid) == CmdlineMatch::kUnknown);
  CHECK(CmdlineCarries(std::nullopt, flag, uid) == CmdlineMatch::kUnknown);
}

}  // namespace base
