#include "base/socket_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "absl/strings/str_cat.h"

namespace base {

absl::StatusOr<SocketAddress> IpSocketAddress(const std::string& host, uint16_t port) {
  SocketAddress addr;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr.storage);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    addr.length = sizeof(*v4);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    addr.length = sizeof(*v6);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("not an IP address: ", host));
  }
  return addr;
}

}  // namespace base
