// A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it).
// For local pods and tests, which run side by side and must not collide.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace base {

// 0 when no port could be had.
uint16_t FreeLoopbackPort();

// Ports first..last, both included.
struct PortRange {
  uint16_t first = 0;
  uint16_t last = 0;
};

// "FIRST-LAST", 1 <= FIRST <= LAST <= 65535; InvalidArgument saying so otherwise.
absl::StatusOr<PortRange> ParsePortRange(absl::string_view text);

// The kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range): where
// a bind to port 0, like every outgoing connection, gets its port.
absl::StatusOr<PortRange> EphemeralPortRange();

}  // namespace base
