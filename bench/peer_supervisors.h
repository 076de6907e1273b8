// The peers share-manager is compared with: the same ganesha config run under
// s6-supervise or supervisord with their stock restart behaviour.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "supervisor/child_process.h"

namespace bench {

enum class PeerKind { kS6, kSupervisord };

const char* PeerName(PeerKind kind);

class PeerSupervisor {
 public:
  // Writes the ganesha config (rendered by share-manager's own renderer, so
  // every supervisor runs the same file) and starts the peer in `dir`.
  static absl::StatusOr<std::unique_ptr<PeerSupervisor>> Start(PeerKind kind,
                                                               const std::string& dir,
                                                               const std::string& volume,
                                                               uint16_t nfs_port);
  ~PeerSupervisor();

  // The current ganesha pid, from the pid file ganesha writes.
  pid_t GaneshaPid() const;
  const std::string& export_dir() const { return export_dir_; }

 private:
  PeerSupervisor() = default;
  std::string dir_, export_dir_, pid_file_;
  std::optional<supervisor::ChildProcess> process_;
};

}  // namespace bench
