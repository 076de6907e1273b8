// The unix socket's path and mode checks, on real files.
#include "sharemgr/unix_socket.h"

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/unique_fd.h"
#include "tests/support/temp_dir.h"

namespace sharemgr {
namespace {

// A socket file left at `path`, as a share-manager killed with SIGKILL leaves it.
void LeaveSocket(const std::string& path) {
  base::UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.get() >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  REQUIRE(lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("a socket directory anyone can write is refused, a missing one too") {
  testing_support::TempDir dir;
  REQUIRE(chmod(dir.path().c_str(), 01777) == 0);  // like /tmp: sticky does not help
  const auto open_dir = PrepareSocketPath(dir.path() + "/sm.sock");
  CHECK(open_dir.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(open_dir.message()).find("world-writable") != std::string::npos);
  CHECK_FALSE(PrepareSocketPath(dir.path() + "/missing/sm.sock").ok());
  REQUIRE(chmod(dir.path().c_str(), 0750) == 0);
  CHECK(PrepareSocketPath(dir.path() + "/sm.sock").ok());
}

TEST_CASE("a stale socket is removed, anything else at the path is refused and kept") {
  testing_support::TempDir dir;
  const std::string stale = dir.path() + "/stale.sock";
  LeaveSocket(stale);
  REQUIRE(std::filesystem::exists(stale));
  CHECK(PrepareSocketPath(stale).ok());
  CHECK_FALSE(std::filesystem::exists(stale));

  const std::string file = dir.path() + "/precious";
  std::ofstream(file) << "data";
  CHECK(PrepareSocketPath(file).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::filesystem::exists(file));
}

TEST_CASE("a socket is restricted to its owner, or to its owner and the group given") {
  testing_support::TempDir dir;
  const std::string path = dir.path() + "/sm.sock";
  LeaveSocket(path);
  REQUIRE(RestrictSocket(path, std::nullopt).ok());
  CHECK(ModeOf(path) == 0600);
  REQUIRE(RestrictSocket(path, gid_t{4}).ok());  // adm, in every Debian
  CHECK(ModeOf(path) == 0660);
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK(st.st_gid == 4);
}

TEST_CASE("--socket-group takes a group name or a gid, and names an unknown group") {
  CHECK(*ResolveSocketGroup("0") == 0);
  CHECK(*ResolveSocketGroup("root") == 0);
  const auto unknown = ResolveSocketGroup("no-such-group-here");
  CHECK(unknown.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(unknown.status().message()).find("no-such-group-here") != std::string::npos);
}

TEST_CASE("a socket path that is a symlink is never chmodded through, nor its target chowned") {
  testing_support::TempDir dir;
  const std::string victim = dir.path() + "/victim";
  std::ofstream(victim) << "root's";
  REQUIRE(chmod(victim.c_str(), 0600) == 0);
  const std::string path = dir.path() + "/sm.sock";
  REQUIRE(symlink(victim.c_str(), path.c_str()) == 0);
  CHECK(RestrictSocket(path, gid_t{4}).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(ModeOf(victim) == 0600);
  struct stat st {};
  REQUIRE(stat(victim.c_str(), &st) == 0);
  CHECK(st.st_gid == 0);
}

TEST_CASE("a socket directory its group can write, or another user owns, is refused") {
  testing_support::TempDir dir;
  REQUIRE(chmod(dir.path().c_str(), 0770) == 0);
  CHECK(PrepareSocketPath(dir.path() + "/sm.sock").code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(chmod(dir.path().c_str(), 0750) == 0);
  REQUIRE(chown(dir.path().c_str(), 4242, 0) == 0);
  CHECK(PrepareSocketPath(dir.path() + "/sm.sock").code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(chown(dir.path().c_str(), 0, 0) == 0);
  CHECK(PrepareSocketPath(dir.path() + "/sm.sock").ok());
}

}  // namespace sharemgr
