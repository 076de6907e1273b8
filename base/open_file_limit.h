// How many file descriptors this process may hold. Every connection to a gRPC
// port costs one, and so does each NFS probe: a daemon left at a low soft
// limit (often 1024) runs out long before the kernel's hard limit would.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace base {

struct OpenFileLimit {
  uint64_t soft = 0;
  uint64_t hard = 0;
};

// Raises the soft RLIMIT_NOFILE to the hard limit; the limits in force after.
absl::StatusOr<OpenFileLimit> RaiseOpenFileLimit();

}  // namespace base
