#include "sharemgr/unix_socket.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace sharemgr {

absl::StatusOr<gid_t> ResolveSocketGroup(const std::string& name_or_gid) {
  uint32_t gid = 0;
  if (absl::SimpleAtoi(name_or_gid, &gid)) return static_cast<gid_t>(gid);
  group entry{};
  group* found = nullptr;
  std::vector<char> buffer(16 * 1024);
  const int error = getgrnam_r(name_or_gid.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (error != 0 || found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--socket-group: no group '", name_or_gid, "'",
                                                   error != 0 ? ": " : "",
                                                   error != 0 ? std::strerror(error) : ""));
  }
  return found->gr_gid;
}

absl::Status PrepareSocketPath(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--socket: directory ", dir, " does not exist"));
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--socket: directory ", dir,
                     " is world-writable (anyone could replace the socket); use a directory "
                     "only its owner can write, e.g. /run/share-manager"));
  }
  if ((st.st_mode & S_IWGRP) != 0 || (st.st_uid != 0 && st.st_uid != geteuid())) {
    return absl::FailedPreconditionError(
        absl::StrCat("--socket: directory ", dir,
                     " can be written by someone else than root or this user (its owner or "
                     "group), who could replace the socket; use a directory only its owner "
                     "can write"));
  }
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("--socket: ", path, " exists and is not a socket; not removing it"));
    }
    if (unlink(path.c_str()) != 0) {  // a stale socket from a previous run
      return absl::FailedPreconditionError(
          absl::StrCat("--socket: cannot remove the stale ", path, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status RestrictSocket(const std::string& path, std::optional<gid_t> group) {
  // Never through a symlink: whatever was planted at the path keeps its
  // owner and mode (chown/chmod would follow it to any file).
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--socket: ", path, " is not the socket just created; not touching it"));
  }
  if (group &&
      fchownat(AT_FDCWD, path.c_str(), static_cast<uid_t>(-1), *group, AT_SYMLINK_NOFOLLOW) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--socket-group: cannot give ", path, " to gid ", *group, ": ", std::strerror(errno)));
  }
  if (fchmodat(AT_FDCWD, path.c_str(), group ? 0660 : 0600, AT_SYMLINK_NOFOLLOW) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--socket: cannot chmod ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace sharemgr
