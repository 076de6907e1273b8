// `share-manager daemon`: wires the supervisor, the share, the status board and
// the gRPC server together, runs until stopped or failed, returns the exit code.
#pragma once

#include "sharemgr/daemon_config.h"

namespace sharemgr {

int RunDaemon(const DaemonConfig& config);

}  // namespace sharemgr
