#include "base/open_file_limit.h"

#include <doctest/doctest.h>
#include <sys/resource.h>

namespace base {

// ctest runs each case in a process of its own: lowering the limit here
// touches nothing else.
TEST_CASE("the soft open-file limit is raised to the hard one") {
  rlimit before{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &before) == 0);
  REQUIRE(before.rlim_max > 256);
  rlimit lowered = before;
  lowered.rlim_cur = 256;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &lowered) == 0);

  const auto raised = RaiseOpenFileLimit();
  REQUIRE(raised.ok());
  CHECK(raised->soft == before.rlim_max);
  CHECK(raised->hard == before.rlim_max);
  rlimit after{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &after) == 0);
  CHECK(after.rlim_cur == before.rlim_max);
  CHECK(after.rlim_max == before.rlim_max);
}

}  // namespace base
