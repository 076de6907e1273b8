#include "base/file_lock.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>

#include "tests/support/temp_dir.h"

namespace base {
namespace {

using testing_support::TempDir;

// The FD_CLOEXEC flag of the fd this process has open on `path`, if any.
std::optional<bool> CloseOnExecOf(const std::string& path) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(entry.path(), ec) != path) continue;
    const int fd = std::stoi(entry.path().filename());
    return (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("FileLock: a lock file is held once, named with its holder's pid, and released") {
  TempDir t;
  const std::string path = t.path() + "/store.lock";
  std::optional<FileLock> first;
  {
    auto held = FileLock::Acquire(path, FileLock::Kind::kLockFile, "test");
    REQUIRE_MESSAGE(held.ok(), held.status().ToString());
    first.emplace(*std::move(held));
  }
  CHECK(CloseOnExecOf(path) == true);  // a spawned child must not inherit the lock
  const auto second = FileLock::Acquire(path, FileLock::Kind::kLockFile, "test");
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(second.status().message() ==
        "another test holds " + path + " (pid " + std::to_string(getpid()) + ")");
  first.reset();
  CHECK(FileLock::Acquire(path, FileLock::Kind::kLockFile, "test").ok());
}

TEST_CASE("FileLock: a directory is locked itself and must exist") {
  TempDir t;
  auto held = FileLock::Acquire(t.path(), FileLock::Kind::kDirectory, "test");
  REQUIRE_MESSAGE(held.ok(), held.status().ToString());
  CHECK(CloseOnExecOf(t.path()) == true);
  CHECK(!FileLock::Acquire(t.path(), FileLock::Kind::kDirectory, "test").ok());
  CHECK(!FileLock::Acquire(t.path() + "/missing", FileLock::Kind::kDirectory, "test").ok());
  CHECK(!std::filesystem::exists(t.path() + "/missing"));
}

TEST_CASE("FileLock: shared holders coexist, and exclude an exclusive one both ways") {
  TempDir t;
  using Sharing = FileLock::Sharing;
  const auto lock = [&](Sharing sharing) {
    return FileLock::Acquire(t.path(), FileLock::Kind::kDirectory, "test", sharing);
  };
  std::optional<FileLock> one, two;
  {
    auto a = lock(Sharing::kShared);
    auto b = lock(Sharing::kShared);
    REQUIRE_MESSAGE(a.ok(), a.status().ToString());
    REQUIRE_MESSAGE(b.ok(), b.status().ToString());
    one.emplace(*std::move(a));
    two.emplace(*std::move(b));
  }
  const auto exclusive = lock(Sharing::kExclusive);
  REQUIRE_FALSE(exclusive.ok());
  CHECK(exclusive.status().message().find("another test holds " + t.path()) == 0);
  one.reset();
  CHECK_FALSE(lock(Sharing::kExclusive).ok());  // the other shared holder is still there
  two.reset();
  auto alone = lock(Sharing::kExclusive);
  REQUIRE(alone.ok());
  CHECK_FALSE(lock(Sharing::kShared).ok());
}

}  // namespace base
