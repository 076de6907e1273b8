#include "base/log_limiter.h"

#include <doctest/doctest.h>

namespace base {
namespace {

class ManualClock final : public TimeSource {
 public:
  TimePoint Now() const override { return now; }
  TimePoint now{std::chrono::hours(1)};
};

}  // namespace

TEST_CASE("a rate-limited log: the first at once, then one per period with the count held back") {
  ManualClock clock;
  LogLimiter limiter(Duration(30'000), clock);
  CHECK(limiter.Admit() == 0u);
  for (int i = 0; i < 5; ++i) {
    clock.now += Duration(1000);
    CHECK_FALSE(limiter.Admit().has_value());
  }
  clock.now += Duration(25'000);  // 30 s after the first
  CHECK(limiter.Admit() == 5u);
  clock.now += Duration(29'999);
  CHECK_FALSE(limiter.Admit().has_value());
  clock.now += Duration(1);
  CHECK(limiter.Admit() == 1u);
  clock.now += std::chrono::hours(1);  // quiet for long: the next is logged, none held back
  CHECK(limiter.Admit() == 0u);
  CHECK(LogLimiter::HeldBack(0).empty());
  CHECK(LogLimiter::HeldBack(5) == " (5 more since the last report)");
}

}  // namespace base
