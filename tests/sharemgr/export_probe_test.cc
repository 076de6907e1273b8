// The export probe's bound on error answers: ganesha answering the LOOKUP
// with an error is not ready but alive, until the errors have lasted.
#include "sharemgr/export_probe.h"

#include <doctest/doctest.h>

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

}  // namespace
}  // namespace sharemgr
