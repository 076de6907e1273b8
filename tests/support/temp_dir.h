// A private temp dir for a test, removed with everything in it when the
// object goes, pass or fail. Never through a mount: anything still mounted
// under it is reported as a leftover and detached first.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/mount.h>

#include <filesystem>
#include <string>

#include "tests/support/leftovers.h"
#include "tests/support/loop_device.h"

namespace testing_support {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "sharemgr-test") {
    std::string pattern = "/tmp/" + prefix + ".XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    for (const auto& target : MountsUnder(path_)) {
      ReportLeftover(target + " still mounted when its test's temp dir went");
      umount2(target.c_str(), MNT_DETACH);
    }
    if (!MountsUnder(path_).empty()) return;  // leave it rather than delete through a mount
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace testing_support
