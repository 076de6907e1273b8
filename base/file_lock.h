// A non-blocking flock held for the owner's lifetime: exclusive, one process
// per resource (a store file, a work directory); or shared, any number of
// processes of one kind (highly available share-controller replicas on one
// work dir) and none holding it exclusively. The kernel drops it when the
// process dies, however it dies, so a crash never leaves a stale lock.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace base {

class FileLock {
 public:
  enum class Kind {
    kLockFile,   // a file kept only for locking, created (0600) when missing
    kDirectory,  // an existing directory, locked itself
  };

  enum class Sharing { kExclusive, kShared };

  // Takes the lock or fails at once. When another process holds it (any
  // lock, for kExclusive; an exclusive one, for kShared) the error is
  // FailedPrecondition "another <holder> holds <path> (pid N)" (the pid as
  // /proc/locks names it, "pid unknown" when it cannot be found).
  static absl::StatusOr<FileLock> Acquire(const std::string& path, Kind kind,
                                          const std::string& holder,
                                          Sharing sharing = Sharing::kExclusive);

  FileLock(FileLock&&) = default;
  FileLock& operator=(FileLock&&) = default;

  const std::string& path() const { return path_; }

 private:
  FileLock(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}

  std::string path_;
  // O_CLOEXEC: a flock belongs to the open file description, so a child that
  // inherited the fd would keep holding the lock after this process is gone.
  UniqueFd fd_;
};

}  // namespace base
