// A TCP endpoint's address from an IP literal and a port, ready for
// connect(2) or bind(2): IPv4 or IPv6, no name lookup.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace base {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
};

// InvalidArgument when `host` is not an IPv4 or IPv6 literal.
absl::StatusOr<SocketAddress> IpSocketAddress(const std::string& host, uint16_t port);

}  // namespace base
