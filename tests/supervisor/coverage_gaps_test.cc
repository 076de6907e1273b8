// Cases the coverage report (scripts/coverage.sh, docs/COVERAGE.md) found no
// test running: what an out-of-range health state is called and allowed, a
// bare command name not in PATH, and an executable file execve refuses.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <fstream>

#include "supervisor/child_process.h"
#include "supervisor/health_state.h"
#include "tests/support/temp_dir.h"

namespace supervisor {

TEST_CASE(
    "coverage: an out-of-range health state is UNKNOWN and no transition from it is allowed") {
  const auto bogus = static_cast<State>(99);
  CHECK(StateName(bogus) == "UNKNOWN");
  CHECK_FALSE(HealthStateMachine::Allowed(bogus, State::kStopping));
}

TEST_CASE("coverage: a command name found nowhere in PATH is NotFound, nothing is forked") {
  auto child = ChildProcess::Spawn({"sharemgr-no-such-command-anywhere"});
  REQUIRE_FALSE(child.ok());
  CHECK(child.status().code() == absl::StatusCode::kNotFound);
  CHECK(child.status().message() == "sharemgr-no-such-command-anywhere not found in PATH");
}

TEST_CASE("coverage: an executable file that execve refuses is reported by the parent") {
  testing_support::TempDir dir;
  const std::string path = dir.path() + "/not-a-program";
  std::ofstream(path) << "\x7f"
                         "ELF but not really\n";
  REQUIRE(chmod(path.c_str(), 0755) == 0);
  auto child = ChildProcess::Spawn({path});
  REQUIRE_FALSE(child.ok());
  CHECK(child.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(child.status().message() == "cannot execute " + path + ": Exec format error");
}

}  // namespace supervisor
