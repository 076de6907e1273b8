// The export probe's bound on error answers: ganesha answering the LOOKUP
// with an error is not ready but alive, until the errors have lasted.
#include "sharemgr/export_probe.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "tests/support/fake_rpc_server.h"

namespace sharemgr {
namespace {

using std::chrono::milliseconds;

const absl::Status kDelay = absl::FailedPreconditionError("NFS4ERR_DELAY");

TEST_CASE("export probe: error answers are not ready, not misses, until they have lasted") {
  ErrorAnswerStreak streak(milliseconds(30'000));
  const base::TimePoint t0{};
  CHECK(streak.Judge(kDelay, t0).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(streak.Judge(kDelay, t0 + milliseconds(29'999)).code() ==
        absl::StatusCode::kFailedPrecondition);
  // 30 s of nothing but errors: each one from now on is a miss, saying why.
  const auto miss = streak.Judge(kDelay, t0 + milliseconds(30'000));
  CHECK(miss.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(miss.message()).find("NFS4ERR_DELAY, in every answer for 30") == 0);
  CHECK(streak.Judge(kDelay, t0 + milliseconds(31'000)).code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("export probe: an Ok or NotFound answer ends a streak of error answers") {
  for (const auto& end : {absl::OkStatus(), absl::NotFoundError("not exported")}) {
    CAPTURE(end);
    ErrorAnswerStreak streak(milliseconds(30'000));
    const base::TimePoint t0{};
    CHECK(streak.Judge(kDelay, t0).code() == absl::StatusCode::kFailedPrecondition);
    CHECK(streak.Judge(end, t0 + milliseconds(20'000)) == end);
    // A new streak starts here: 20 s of it is not 40 s.
    CHECK(streak.Judge(kDelay, t0 + milliseconds(20'001)).code() ==
          absl::StatusCode::kFailedPrecondition);
    CHECK(streak.Judge(kDelay, t0 + milliseconds(40'000)).code() ==
          absl::StatusCode::kFailedPrecondition);
    CHECK(streak.Judge(kDelay, t0 + milliseconds(50'001)).code() == absl::StatusCode::kUnavailable);
  }
}

TEST_CASE("export probe: no answer is a miss as it is, and does not end a streak") {
  ErrorAnswerStreak streak(milliseconds(30'000));
  const base::TimePoint t0{};
  const auto timeout = absl::DeadlineExceededError("no answer");
  CHECK(streak.Judge(timeout, t0) == timeout);
  CHECK(streak.Judge(kDelay, t0 + milliseconds(1)).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(streak.Judge(timeout, t0 + milliseconds(10'000)) == timeout);
  CHECK(streak.Judge(kDelay, t0 + milliseconds(30'001)).code() == absl::StatusCode::kUnavailable);
}

// A process that listens nowhere: /bin/sleep, returned only once it runs it.
// Until its exec the forked child still holds every descriptor of this
// process, a FakeRpcServer's listener too (close-on-exec closes it only at
// the exec): an owner check then would find the listener among its files.
// The pipe's write end is close-on-exec as well, so the read's EOF is the
// exec (or the child's exit, when it failed).
pid_t SpawnListeningNowhere() {
  int sync[2];
  REQUIRE(pipe2(sync, O_CLOEXEC) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(sync[0]);
    execl("/bin/sleep", "sleep", "30", nullptr);
    _exit(127);
  }
  close(sync[1]);
  char byte = 0;
  ssize_t n = 0;
  while ((n = read(sync[0], &byte, 1)) < 0 && errno == EINTR) {
  }
  close(sync[0]);
  REQUIRE(n == 0);
  return pid;
}

void Reap(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

TEST_CASE("export probe: a NULL answer from a process other than ganesha is no answer") {
  // Another server took the NFS port before ganesha could: it answers NULL.
  testing_support::FakeRpcServer other(testing_support::FakeRpcServer::Mode::kAnswer);
  const pid_t ganesha = SpawnListeningNowhere();
  ExportProbe probe("127.0.0.1", other.port(), "pvc-1", "");
  const auto answer = probe.Probe(ganesha, 1, milliseconds(2000));
  Reap(ganesha);
  CHECK(answer.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(answer.message())
            .find("NFS NULL answered on 127.0.0.1:" + std::to_string(other.port()) +
                  ", but not by ganesha pid " + std::to_string(ganesha)) == 0);
}

TEST_CASE("export probe: the NULL answer of the process holding the port's listener counts") {
  testing_support::FakeRpcServer ours(testing_support::FakeRpcServer::Mode::kAnswer);
  ExportProbe probe("127.0.0.1", ours.port(), "pvc-1", "");
  // NULL is answered by this process, which holds the listener; the LOOKUP
  // that follows finds no one accepting (the fake serves one connection).
  const auto answer = probe.Probe(getpid(), 1, milliseconds(300));
  CHECK(std::string(answer.message()).find("not by ganesha") == std::string::npos);
  CHECK(std::string(answer.message()).find("NFS NULL") == std::string::npos);
}

// Owner checks answered as scripted, counted.
struct ScriptedOwner {
  absl::Status answer;
  int calls = 0;
  ExportProbe::OwnerCheck Check() {
    return [this](pid_t, const std::string&, uint16_t) {
      ++calls;
      return answer;
    };
  }
};

TEST_CASE("export probe: an owner that cannot be checked is no miss: the NULL answer counts") {
  for (const auto& cannot :
       {absl::UnavailableError("cannot read /proc/7/net/tcp: Permission denied"),
        absl::InvalidArgumentError("'fe80::1%eth0' is not an IP address")}) {
    CAPTURE(cannot);
    testing_support::FakeRpcServer server(testing_support::FakeRpcServer::Mode::kAnswer);
    ScriptedOwner owner{.answer = cannot};
    ExportProbe probe("127.0.0.1", server.port(), "pvc-1", "", base::SteadyClock(), owner.Check());
    const auto answer = probe.Probe(4242, 1, milliseconds(300));
    CHECK(owner.calls == 1);
    CHECK(std::string(answer.message()).find("not by ganesha") == std::string::npos);
    CHECK(std::string(answer.message()).find("NFS NULL") == std::string::npos);
  }
  // Another process's listener still is a miss.
  testing_support::FakeRpcServer server(testing_support::FakeRpcServer::Mode::kAnswer);
  ScriptedOwner owner{.answer = absl::FailedPreconditionError("belongs to another process")};
  ExportProbe probe("127.0.0.1", server.port(), "pvc-1", "", base::SteadyClock(), owner.Check());
  const auto answer = probe.Probe(4242, 1, milliseconds(2000));
  CHECK(answer.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(answer.message()).find("but not by ganesha pid 4242") != std::string::npos);
}

TEST_CASE("export probe: the owner is confirmed once per spawn, not per pid (pids come again)") {
  // Each probe connects twice: NULL, then the LOOKUP.
  testing_support::FakeRpcServer server(testing_support::FakeRpcServer::Mode::kAnswer, 6);
  ScriptedOwner owner{.answer = absl::OkStatus()};
  ExportProbe probe("127.0.0.1", server.port(), "pvc-1", "", base::SteadyClock(), owner.Check());
  (void)probe.Probe(4242, 1, milliseconds(2000));
  CHECK(owner.calls == 1);
  (void)probe.Probe(4242, 1, milliseconds(2000));
  CHECK(owner.calls == 1);  // the same spawn: confirmed already
  // The same pid for the next spawn (another process that got it again):
  // checked again.
  (void)probe.Probe(4242, 2, milliseconds(2000));
  CHECK(owner.calls == 2);
}

}  // namespace
}  // namespace sharemgr
