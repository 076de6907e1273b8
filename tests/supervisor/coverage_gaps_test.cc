// Cases the coverage report (scripts/coverage.sh, docs/COVERAGE.md) found no
// test running: what an out-of-range health state is called and allowed.
#include <doctest/doctest.h>

#include "supervisor/health_state.h"

namespace supervisor {

TEST_CASE(
    "coverage: an out-of-range health state is UNKNOWN and no transition from it is allowed") {
  const auto bogus = static_cast<State>(99);
  CHECK(StateName(bogus) == "UNKNOWN");
  CHECK_FALSE(HealthStateMachine::Allowed(bogus, State::kStopping));
}

}  // namespace supervisor
