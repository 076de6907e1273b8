#include "base/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/files.h"

namespace base {
namespace {

// The pid /proc/locks names for a FLOCK on this file, or "pid unknown". Only
// for the message: the lock itself is the kernel's word.
std::string HolderPid(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return "pid unknown";
  // Lines look like "1: FLOCK  ADVISORY  WRITE 4242 fd:01:123456 0 EOF".
  const std::string inode =
      absl::StrCat(absl::StrFormat("%02x:%02x:", major(st.st_dev), minor(st.st_dev)), st.st_ino);
  const auto locks = ReadFile("/proc/locks");
  if (!locks.ok()) return "pid unknown";
  for (absl::string_view line : absl::StrSplit(*locks, '\n')) {
    const std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (fields.size() >= 6 && fields[1] == "FLOCK" && fields[5] == inode) {
      return absl::StrCat("pid ", fields[4]);
    }
  }
  return "pid unknown";
}

}  // namespace

absl::StatusOr<FileLock> FileLock::Acquire(const std::string& path, Kind kind,
                                           const std::string& holder, Sharing sharing) {
  UniqueFd fd(kind == Kind::kDirectory
                  ? open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                  : open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open ", path, " to lock it: ", std::strerror(errno)));
  }
  const int operation = sharing == Sharing::kShared ? LOCK_SH : LOCK_EX;
  while (flock(fd.get(), operation | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("another ", holder, " holds ", path, " (", HolderPid(fd.get()), ")"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cannot lock ", path, ": ", std::strerror(errno)));
  }
  return FileLock(path, std::move(fd));
}

}  // namespace base
