// The export probe's bound on error answers: ganesha answering the LOOKUP
// with an error is not ready but alive, until the errors have lasted.
#include "sharemgr/export_probe.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

TEST_CASE("export probe: a NULL answer from a process other than ganesha is no answer") {
  // Another server took the NFS port before ganesha could: it answers NULL.
  testing_support::FakeRpcServer other(testing_support::FakeRpcServer::Mode::kAnswer);
  // "ganesha": a process that listens nowhere (the server's socket is
  // close-on-exec, so it does not inherit it).
  const pid_t ganesha = fork();
  REQUIRE(ganesha >= 0);
  if (ganesha == 0) {
    execl("/bin/sleep", "sleep", "30", nullptr);
    _exit(127);
  }
  ExportProbe probe("127.0.0.1", other.port(), "pvc-1", "");
  const auto answer = probe.Probe(ganesha, milliseconds(2000));
  kill(ganesha, SIGKILL);
  waitpid(ganesha, nullptr, 0);
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
  const auto answer = probe.Probe(getpid(), milliseconds(300));
  CHECK(std::string(answer.message()).find("not by ganesha") == std::string::npos);
  CHECK(std::string(answer.message()).find("NFS NULL") == std::string::npos);
}

}  // namespace
}  // namespace sharemgr
