// Cases the coverage report (scripts/coverage.sh, docs/COVERAGE.md) found no
// test running: flag combinations refused, an out-of-range volume state's name.
#include <doctest/doctest.h>

#include "sharemgr/daemon_config.h"
#include "sharemgr/volume_owner.h"

namespace sharemgr {

TEST_CASE("coverage: --max-repairs beyond 1000 is refused") {
  DaemonFlags flags;
  flags.volume = "pvc-1";
  flags.max_repairs = 1001;
  const auto config = ResolveDaemonConfig(flags);
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().message() == "--max-repairs must be between 0 and 1000");
}

TEST_CASE("coverage: device-only flags without a device (an export dir served as is) are refused") {
  DaemonFlags flags;
  flags.volume = "pvc-1";
  flags.export_dir = "/export/pvc-1";
  flags.format_if_blank = true;
  const auto config = ResolveDaemonConfig(flags);
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().message() ==
        "--format-if-blank, --mkfs-option and --mount-option need --device");
}

TEST_CASE("coverage: an out-of-range volume state is named unknown") {
  CHECK(std::string(VolumeStateName(static_cast<VolumeState>(99))) == "unknown");
}

}  // namespace sharemgr
