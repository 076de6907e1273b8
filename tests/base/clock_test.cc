#include "base/clock.h"

#include <doctest/doctest.h>

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

TEST_CASE("FormatDuration is readable at every scale") {
  CHECK(FormatDuration(Duration(250)) == "250ms");
  CHECK(FormatDuration(Duration(3500)) == "3.5s");
  CHECK(FormatDuration(Duration(600'000)) == "10m0s");
}

}  // namespace base
