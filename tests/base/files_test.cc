#include "base/files.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/validate.h"
#include "tests/support/temp_dir.h"

namespace base {
namespace {

using testing_support::TempDir;

unsigned ModeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("EnsureDirectory creates with the mode and leaves an existing one's mode alone") {
  TempDir t;
  const std::string dir = t.path() + "/a/b";
  REQUIRE(EnsureDirectory(dir, 0755).ok());
  CHECK(ModeOf(dir) == 0755);
  REQUIRE(chmod(dir.c_str(), 0777) == 0);
  REQUIRE(EnsureDirectory(dir, 0755).ok());
  CHECK(ModeOf(dir) == 0777);  // a workload's permissions survive
  REQUIRE(EnsureDirectory(dir, 0700, ExistingMode::kEnforce).ok());
  CHECK(ModeOf(dir) == 0700);
  std::ofstream(t.path() + "/file") << "x";
  CHECK(EnsureDirectory(t.path() + "/file", 0755).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("WriteFileAtomically replaces the content and leaves no temp file behind") {
  TempDir t;
  const std::string file = t.path() + "/store";
  REQUIRE(WriteFileAtomically(file, "one\n").ok());
  REQUIRE(WriteFileAtomically(file, "two\n").ok());
  CHECK(Read(file) == "two\n");
  CHECK(ModeOf(file) == 0600);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(t.path())) ++entries;
  CHECK(entries == 1);
  CHECK(!WriteFileAtomically(t.path() + "/missing/dir/file", "x").ok());
}

TEST_CASE("ReadFile: NotFound only for a missing file, a directory is an error naming it") {
  TempDir t;
  REQUIRE(WriteFileAtomically(t.path() + "/file", "a\nb\n").ok());
  auto content = ReadFile(t.path() + "/file");
  REQUIRE(content.ok());
  CHECK(*content == "a\nb\n");
  CHECK(ReadFile(t.path() + "/missing").status().code() == absl::StatusCode::kNotFound);
  const auto dir = ReadFile(t.path());
  REQUIRE_FALSE(dir.ok());
  CHECK(dir.status().code() != absl::StatusCode::kNotFound);
  CHECK(dir.status().message() == t.path() + " is not a regular file");
}

TEST_CASE("NormalizePath: doubled and trailing slashes and symlinked components") {
  TempDir t;
  CHECK(*NormalizePath("--x", "/a//b/", false) == "/a/b");
  CHECK(*NormalizePath("--x", "/", false) == "/");
  CHECK(!NormalizePath("--x", "relative/", false).ok());
  CHECK(!NormalizePath("--x", "/a/../b", false).ok());
  REQUIRE(EnsureDirectory(t.path() + "/real", 0755).ok());
  REQUIRE(symlink((t.path() + "/real").c_str(), (t.path() + "/link").c_str()) == 0);
  auto resolved = NormalizePath("--x", t.path() + "//link/export/", true);
  REQUIRE(resolved.ok());
  CHECK(*resolved == t.path() + "/real/export");  // the missing tail is kept
  auto existing = NormalizePath("--x", t.path() + "/link", true);
  REQUIRE(existing.ok());
  CHECK(*existing == t.path() + "/real");
}

}  // namespace base
