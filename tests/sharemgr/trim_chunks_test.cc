#include "sharemgr/trim_chunks.h"

#include <doctest/doctest.h>

#include <limits>
#include <utility>
#include <vector>

#include "tests/support/fake_time_source.h"

namespace sharemgr {
namespace {

using std::chrono::seconds;
using testing_support::FakeTimeSource;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kOpenEnded = std::numeric_limits<uint64_t>::max();
const TrimStopFn kGoOn = [] { return absl::OkStatus(); };

// A fake FITRIM: records each range, reports `trimmed_each` bytes, and moves
// the clock by `takes` per range.
struct FakeRanges {
  FakeTimeSource& clock;
  base::Duration takes{0};
  uint64_t trimmed_each = kMiB;
  std::vector<std::pair<uint64_t, uint64_t>> calls;

  TrimRangeFn Fn() {
    return [this](uint64_t start, uint64_t len) -> absl::StatusOr<uint64_t> {
      calls.emplace_back(start, len);
      clock.Advance(takes);
      return trimmed_each;
    };
  }
};

TEST_CASE(
    "TrimInChunks covers 0 to the size once, in order, the last range open-ended, and a trim "
    "whose last range ends past the deadline is done") {
  FakeTimeSource clock;
  FakeRanges ranges{.clock = clock, .takes = seconds(1)};
  // Ranges end at +1 s, +2 s, +3 s.
  const auto trimmed =
      TrimInChunks(10 * kMiB, 4 * kMiB, clock.Now() + seconds(2), clock, kGoOn, ranges.Fn());
  REQUIRE(trimmed.ok());
  CHECK(*trimmed == 3 * kMiB);  // the sum of what each range trimmed
  const std::vector<std::pair<uint64_t, uint64_t>> want = {
      {0, 4 * kMiB}, {4 * kMiB, 4 * kMiB}, {8 * kMiB, kOpenEnded - 8 * kMiB}};
  CHECK(ranges.calls == want);
}

TEST_CASE("TrimInChunks: a size that is a whole number of chunks ends on an open-ended range") {
  FakeTimeSource clock;
  FakeRanges ranges{.clock = clock};
  REQUIRE(TrimInChunks(8 * kMiB, 4 * kMiB, clock.Now(), clock, kGoOn, ranges.Fn()).ok());
  const std::vector<std::pair<uint64_t, uint64_t>> want = {{0, 4 * kMiB},
                                                           {4 * kMiB, kOpenEnded - 4 * kMiB}};
  CHECK(ranges.calls == want);
}

TEST_CASE("TrimInChunks: one range for a filesystem smaller than a chunk, none for 0 bytes") {
  FakeTimeSource clock;
  FakeRanges ranges{.clock = clock};
  CHECK(*TrimInChunks(3 * kMiB, 4 * kMiB, clock.Now(), clock, kGoOn, ranges.Fn()) == kMiB);
  const std::vector<std::pair<uint64_t, uint64_t>> want = {{0, kOpenEnded}};
  CHECK(ranges.calls == want);
  ranges.calls.clear();
  CHECK(*TrimInChunks(0, 4 * kMiB, clock.Now(), clock, kGoOn, ranges.Fn()) == 0);
  CHECK(ranges.calls.empty());
  CHECK(TrimInChunks(3 * kMiB, 0, clock.Now(), clock, kGoOn, ranges.Fn()).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE(
    "TrimInChunks stops at the first range that ends past the deadline: DEADLINE_EXCEEDED with "
    "what it trimmed and how far it got") {
  FakeTimeSource clock;
  FakeRanges ranges{.clock = clock, .takes = seconds(2), .trimmed_each = 3 * kMiB};
  // Ranges end at +2 s, +4 s, +6 s: the third is the first past +5 s.
  const auto trimmed =
      TrimInChunks(40 * kMiB, 4 * kMiB, clock.Now() + seconds(5), clock, kGoOn, ranges.Fn());
  REQUIRE_FALSE(trimmed.ok());
  CHECK(trimmed.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(ranges.calls.size() == 3);
  const std::string message(trimmed.status().message());
  CHECK_MESSAGE(
      message.find("trimmed 9.0 MiB in the first 12.0 MiB of 40.0 MiB") != std::string::npos,
      message);
  CHECK_MESSAGE(message.find("run trim again") != std::string::npos, message);
}

TEST_CASE("TrimInChunks: the first range runs even when the deadline has passed") {
  FakeTimeSource clock;
  FakeRanges ranges{.clock = clock};
  const auto trimmed =
      TrimInChunks(40 * kMiB, 4 * kMiB, clock.Now() - seconds(1), clock, kGoOn, ranges.Fn());
  CHECK(trimmed.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(ranges.calls.size() == 1);
}

TEST_CASE("TrimInChunks: a range's error ends the trim with that error") {
  FakeTimeSource clock;
  std::vector<uint64_t> starts;
  const auto trimmed = TrimInChunks(40 * kMiB, 4 * kMiB, clock.Now() + seconds(60), clock, kGoOn,
                                    [&](uint64_t start, uint64_t) -> absl::StatusOr<uint64_t> {
                                      starts.push_back(start);
                                      if (start == 8 * kMiB)
                                        return absl::FailedPreconditionError("FITRIM: EIO (test)");
                                      return kMiB;
                                    });
  CHECK(trimmed.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(trimmed.status().message() == "FITRIM: EIO (test)");
  CHECK(starts == std::vector<uint64_t>{0, 4 * kMiB, 8 * kMiB});
}

TEST_CASE(
    "TrimInChunks asks `stop` before every range: a stop between ranges ends the trim with its "
    "code and reason, and how far it got") {
  FakeTimeSource clock;
  FakeRanges ranges{.clock = clock, .trimmed_each = 3 * kMiB};
  int asked = 0;
  const auto trimmed = TrimInChunks(
      40 * kMiB, 4 * kMiB, clock.Now() + seconds(60), clock,
      [&] {
        return ++asked <= 2 ? absl::OkStatus()
                            : absl::FailedPreconditionError("trim stopped: fenced (test)");
      },
      ranges.Fn());
  CHECK(ranges.calls.size() == 2);
  CHECK(asked == 3);
  CHECK(trimmed.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(trimmed.status().message() ==
                    "trim stopped: fenced (test): trimmed 6.0 MiB in the first 8.0 MiB of 40.0 "
                    "MiB; the rest is untrimmed, run trim again (it starts over)",
                trimmed.status());
}

TEST_CASE("TrimInChunks: a stop already requested keeps even the first range from running") {
  FakeTimeSource clock;
  FakeRanges ranges{.clock = clock};
  const auto trimmed = TrimInChunks(
      40 * kMiB, 4 * kMiB, clock.Now() + seconds(60), clock,
      [] { return absl::CancelledError("trim stopped: stopping (test)"); }, ranges.Fn());
  CHECK(trimmed.status().code() == absl::StatusCode::kCancelled);
  CHECK(ranges.calls.empty());
}

TEST_CASE("TrimWorkDeadline: the work stops before the caller stops waiting, so it can answer") {
  const base::TimePoint now{};
  const auto cap = base::Duration(600'000);
  // A far caller: a tenth of its wait is over 5 s, so 5 s before it; the cap is later.
  CHECK(TrimWorkDeadline(now, cap, now + seconds(600)) == now + seconds(595));
  // A near caller: a tenth of what is left.
  CHECK(TrimWorkDeadline(now, cap, now + seconds(10)) == now + seconds(9));
  // The cap first when it comes first.
  CHECK(TrimWorkDeadline(now, base::Duration(1000), now + seconds(600)) == now + seconds(1));
  // A caller already gone: no margin past it (the job would not start anyway).
  CHECK(TrimWorkDeadline(now, cap, now - seconds(1)) == now - seconds(1));
}

}  // namespace
}  // namespace sharemgr
