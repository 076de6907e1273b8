#include "base/clock.h"

#include <doctest/doctest.h>
#include <time.h>

#include <thread>

namespace base {

TEST_CASE("ParseDuration accepts the documented forms") {
  CHECK(*ParseDuration("250ms") == Duration(250));
  CHECK(*ParseDuration("3s") == Duration(3000));
  CHECK(*ParseDuration("1.5s") == Duration(1500));
  CHECK(*ParseDuration("2m") == Duration(120'000));
  CHECK(*ParseDuration("7") == Duration(7000));
  CHECK(*ParseDuration("0s") == Duration(0));
}

TEST_CASE("ParseDuration rejects garbage with a message that shows the input") {
  for (const char* bad : {"", "s", "-1s", "1h", "abc", "1.5.5s", "nan", "inf", "2d", "99999m"}) {
    CAPTURE(bad);
    const auto parsed = ParseDuration(bad);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("ParseFlagDuration names the flag in its errors and holds the minimum") {
  CHECK(*ParseFlagDuration("--wait", "1s", Duration(1000)) == Duration(1000));
  CHECK(*ParseFlagDuration("--wait", "0s") == Duration(0));
  const auto bad = ParseFlagDuration("--wait", "soon");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad.status().message() ==
        "--wait: invalid duration 'soon' (examples: 250ms, 3s, 1.5s, 2m)");
  const auto short_ = ParseFlagDuration("--wait", "999ms", Duration(1000));
  REQUIRE_FALSE(short_.ok());
  CHECK(short_.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(short_.status().message() == "--wait must be at least 1s");
}

TEST_CASE("FormatDuration is readable at every scale") {
  CHECK(FormatDuration(Duration(250)) == "250ms");
  CHECK(FormatDuration(Duration(3500)) == "3.5s");
  CHECK(FormatDuration(Duration(600'000)) == "10m0s");
}

TEST_CASE("BootClock: CLOCK_BOOTTIME, which advances and is never behind the steady clock") {
  // CLOCK_BOOTTIME = CLOCK_MONOTONIC + the time spent suspended: read the
  // steady clock first, and the boot clock can only be at or past it.
  const TimePoint steady = SteadyClock().Now();
  const TimePoint first = BootClock().Now();
  CHECK(first >= steady);
  timespec boot{};
  REQUIRE(clock_gettime(CLOCK_BOOTTIME, &boot) == 0);
  const TimePoint direct(std::chrono::seconds(boot.tv_sec) +
                         std::chrono::nanoseconds(boot.tv_nsec));
  CHECK(direct >= first);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const TimePoint second = BootClock().Now();
  CHECK(second - first >= std::chrono::milliseconds(20));
  CHECK(second >= direct);
}

}  // namespace base
