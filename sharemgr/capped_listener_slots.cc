#include "sharemgr/capped_listener_slots.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace sharemgr {

PeerAddress PeerAddress::From(const sockaddr_storage& address) {
  PeerAddress peer;
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    std::memcpy(peer.bytes.data(), &v6.sin6_addr, peer.bytes.size());
  } else if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    peer.bytes[10] = 0xff;
    peer.bytes[11] = 0xff;
    std::memcpy(peer.bytes.data() + 12, &v4.sin_addr, 4);
  }
  return peer;
}

std::string PeerAddress::ToString() const {
  char text[INET6_ADDRSTRLEN] = {};
  in6_addr v6{};
  std::memcpy(&v6, bytes.data(), bytes.size());
  if (IN6_IS_ADDR_V4MAPPED(&v6)) {
    inet_ntop(AF_INET, bytes.data() + 12, text, sizeof(text));
  } else {
    inet_ntop(AF_INET6, &v6, text, sizeof(text));
  }
  return text;
}

std::optional<size_t> SlotForNewcomer(std::span<const OpenConnection> open,
                                      const PeerAddress& newcomer, base::TimePoint now,
                                      base::Duration replace_after) {
  std::map<PeerAddress, size_t> held;
  for (const auto& connection : open) ++held[connection.peer];
  const size_t newcomers = held[newcomer] + 1;  // its address's, the newcomer counted
  size_t most = 0;
  for (const auto& [peer, count] : held) {
    if (peer != newcomer) most = std::max(most, count);
  }
  if (most > newcomers) {
    // An address that would still hold more than the newcomer's: its oldest
    // goes, whatever its age (the oldest of the biggest when several are).
    for (size_t i = 0; i < open.size(); ++i) {
      if (open[i].peer != newcomer && held[open[i].peer] == most) return i;
    }
  }
  // The newcomer's address would hold as many as any: the oldest of its own
  // and of those as big, once it has been open replace_after.
  for (size_t i = 0; i < open.size(); ++i) {
    if (open[i].peer == newcomer || held[open[i].peer] == newcomers) {
      if (now - open[i].accepted >= replace_after) return i;
      return std::nullopt;  // the rest are younger still
    }
  }
  return std::nullopt;
}

}  // namespace sharemgr
