// A private temp dir for a test, removed with everything in it when the
// object goes, pass or fail.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace testing_support {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "sharemgr-test") {
    std::string pattern = "/tmp/" + prefix + ".XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
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
