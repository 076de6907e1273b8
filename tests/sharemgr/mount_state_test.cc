#include <doctest/doctest.h>

#include "sharemgr/volume.h"

namespace sharemgr {
namespace {

constexpr char kRoot[] = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n";

TEST_CASE("ParseMountState: the last mount at the target, its options and read-only state") {
  const MountState rw = ParseMountState(
      std::string(kRoot) + "98 22 7:3 / /export/vol rw,relatime shared:60 - ext4 /dev/loop3 rw\n",
      "/export/vol");
  CHECK(rw.mounted);
  CHECK(rw.source == "/dev/loop3");
  CHECK(rw.vfs_options == "rw,relatime");
  CHECK(rw.fs_options == "rw");
  CHECK_FALSE(rw.read_only);
  CHECK_FALSE(rw.fs_error);

  // Mounted over: the later line is what the target shows.
  const MountState broken =
      ParseMountState(std::string(kRoot) + "98 22 7:3 / /export/vol rw - ext4 /dev/loop3 rw\n" +
                          "99 98 7:3 / /export/vol rw - ext4 /dev/loop3 ro,emergency_ro\n",
                      "/export/vol");
  CHECK(broken.fs_error);
  CHECK(broken.read_only);

  // Octal escapes in mountinfo are decoded; options match whole, not in part.
  const MountState spaced = ParseMountState(
      std::string(kRoot) + "98 22 7:3 / /export/a\\040b ro - xfs /dev/loop3 rw,errors=ro\n",
      "/export/a b");
  CHECK(spaced.mounted);
  CHECK(spaced.read_only);
  CHECK_FALSE(spaced.fs_error);
}

TEST_CASE("ParseMountState: nothing at the target, or no mountinfo at all, is not mounted") {
  CHECK_FALSE(ParseMountState(kRoot, "/export/vol").mounted);
  CHECK_FALSE(ParseMountState("", "/export/vol").mounted);
  CHECK_FALSE(ParseMountState("garbage\n", "/export/vol").mounted);
}

}  // namespace
}  // namespace sharemgr
