// Directory and file helpers every part uses: create a directory, write a
// file so a crash leaves either the old or the new content, never a mix.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace base {

enum class ExistingMode {
  kKeep,     // an existing directory keeps its permissions (a volume's root: the workload's)
  kEnforce,  // an existing directory is set to `mode` (private state)
};

// Creates the directory (and parents) with `mode` when missing. Fails when the
// path exists but is not a directory.
absl::Status EnsureDirectory(const std::string& path, unsigned mode,
                             ExistingMode existing = ExistingMode::kKeep);

enum class Durability {
  kFsync,     // survives a machine crash: the file and the rename are fsynced
  kReplaced,  // readers see the old or the new content, never a mix; no fsync
              // (for files rewritten at every start, written where blocking is costly)
};

// Writes `content` to a new file beside `path` (a unique name, O_CLOEXEC) and
// renames it over `path`; with kFsync the file is fsynced before the rename and
// the directory after it, so after a crash `path` holds the old or the new
// content and the rename itself is durable.
absl::Status WriteFileAtomically(const std::string& path, const std::string& content,
                                 unsigned mode = 0600, Durability durability = Durability::kFsync);

// Reads the whole regular file through an O_CLOEXEC fd. NotFound only when it
// does not exist; anything else (a directory in its place, EACCES, EIO, a read
// error midway) is another error naming the path, so callers can tell "empty"
// from "unreadable".
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace base
