// A benchmark that cannot go on throws AbortRun; main catches it, so every
// daemon, loop device and temp dir on the way is stopped and removed (a bare
// std::exit or a dereferenced error would skip their destructors and leave
// mounts and processes behind).
#pragma once

#include <sys/types.h>

#include <stdexcept>
#include <string>

#include "absl/status/statusor.h"

namespace bench {

struct AbortRun : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T>
T ValueOrAbort(absl::StatusOr<T> value, const std::string& what) {
  if (!value.ok()) throw AbortRun(what + ": " + value.status().ToString());
  return *std::move(value);
}

// A pid about to be signalled: 0 or less would signal a whole process group.
inline pid_t PidOrAbort(pid_t pid, const std::string& what) {
  if (pid <= 0) throw AbortRun(what + ": no process (pid " + std::to_string(pid) + ")");
  return pid;
}

}  // namespace bench
