// The volume owner end to end (real devices, a real daemon) is
// tests/integration/volume_owner_test.cc; this file holds its pure parts.
#include "sharemgr/volume_owner.h"

#include <doctest/doctest.h>

#include <string>

namespace sharemgr {

TEST_CASE("VolumeStateName calls an out-of-range volume state unknown") {
  CHECK(std::string(VolumeStateName(static_cast<VolumeState>(99))) == "unknown");
}

}  // namespace sharemgr
