// Who gives up a slot of the health port's listener (CappedListener) when a
// new connection arrives at the cap: connections are counted per peer
// address, so a flood from one address cannot crowd out the kubelet's probes
// from another.
//
// The newcomer takes the slot of the oldest connection of the address that
// would still hold more connections than the newcomer's own, however young
// that connection is. When no address would (the newcomer's own would hold as
// many as any: its fair share or more, and nobody is over it), only a
// connection that has been open `replace_after` gives up its slot: the oldest
// of its own address's and of those as big. A flood from one address thus
// turns its own slots over at most once per `replace_after` each, and is
// refused beyond that, while the kubelet's address (under its share) always
// gets in. Why "more than the newcomer's own", not "more than the cap divided
// by the addresses": with that share rounded down, two addresses can both be
// over it and then take slots from each other without end; here a slot taken
// without condition always leaves its address holding at least as many as the
// newcomer's, so none is ever taken back that way.
#pragma once

#include <sys/socket.h>

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "base/clock.h"

namespace sharemgr {

// A peer's IP address: IPv6, or IPv4 mapped into IPv6 (::ffff:a.b.c.d), so a
// dual-stack listener's IPv4 peers and an IPv4 listener's compare alike.
struct PeerAddress {
  std::array<uint8_t, 16> bytes{};

  // From accept()'s address (AF_INET or AF_INET6; anything else is all zeros).
  static PeerAddress From(const sockaddr_storage& address);
  // 127.0.0.2, fd00::1.
  std::string ToString() const;
  auto operator<=>(const PeerAddress&) const = default;
};

struct OpenConnection {
  PeerAddress peer;
  base::TimePoint accepted;
};

// Which of `open` (oldest first, as many as the cap) gives up its slot for a
// new connection from `newcomer` (an index into `open`), or none: the
// newcomer is refused.
std::optional<size_t> SlotForNewcomer(std::span<const OpenConnection> open,
                                      const PeerAddress& newcomer, base::TimePoint now,
                                      base::Duration replace_after);

}  // namespace sharemgr
