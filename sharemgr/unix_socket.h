// The control API's unix socket: who may connect is decided by the file's
// mode and the directory it lives in, so both are checked, never assumed.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace sharemgr {

// The group named by --socket-group: a group name or a numeric gid.
absl::StatusOr<gid_t> ResolveSocketGroup(const std::string& name_or_gid);

// Before binding: the directory must exist and not be world-writable (anyone
// could otherwise replace the socket with their own); a stale socket from a
// previous run is removed, anything else at the path is refused, never
// deleted.
absl::Status PrepareSocketPath(const std::string& path);

// After binding: owner only (0600), or owner and `group` (0660).
absl::Status RestrictSocket(const std::string& path, std::optional<gid_t> group);

}  // namespace sharemgr
