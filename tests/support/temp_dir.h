// A private temp directory for one test, removed with everything in it when
// the test ends, pass or fail (a failed REQUIRE unwinds through it).
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace testing_support {

struct TempDir {
  explicit TempDir(const std::string& prefix = "sharemgr-test") {
    std::string pattern = "/tmp/" + prefix + ".XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path;
};

}  // namespace testing_support
