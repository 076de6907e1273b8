// Which connection of the health port's listener gives up its slot for a
// newcomer at the cap (SlotForNewcomer), and peer addresses as it counts them.
#include "sharemgr/capped_listener_slots.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>

#include <chrono>
#include <string>
#include <vector>

namespace sharemgr {
namespace {

using std::chrono::milliseconds;

constexpr base::Duration kReplaceAfter{1000};
const base::TimePoint kNow(std::chrono::hours(1));

PeerAddress Peer(const std::string& ip) {
  sockaddr_storage address{};
  if (ip.find(':') != std::string::npos) {
    auto& v6 = reinterpret_cast<sockaddr_in6&>(address);
    v6.sin6_family = AF_INET6;
    REQUIRE(inet_pton(AF_INET6, ip.c_str(), &v6.sin6_addr) == 1);
  } else {
    auto& v4 = reinterpret_cast<sockaddr_in&>(address);
    v4.sin_family = AF_INET;
    REQUIRE(inet_pton(AF_INET, ip.c_str(), &v4.sin_addr) == 1);
  }
  return PeerAddress::From(address);
}

// Open connections, oldest first: `count` from `ip`, each `age` old.
void Add(std::vector<OpenConnection>& open, const std::string& ip, size_t count,
         base::Duration age) {
  for (size_t i = 0; i < count; ++i) open.push_back({.peer = Peer(ip), .accepted = kNow - age});
}

}  // namespace

TEST_CASE("peer addresses: IPv4 and IPv4 mapped into IPv6 are one address") {
  CHECK(Peer("127.0.0.2") == Peer("::ffff:127.0.0.2"));
  CHECK(Peer("127.0.0.2") != Peer("127.0.0.1"));
  CHECK(Peer("::ffff:127.0.0.2").ToString() == "127.0.0.2");
  CHECK(Peer("fd00::1").ToString() == "fd00::1");
  CHECK(Peer("fd00::1") != Peer("fd00::2"));
}

TEST_CASE("slots: a newcomer takes the oldest slot of an address that would still hold more") {
  std::vector<OpenConnection> open;
  Add(open, "127.0.0.1", 1, milliseconds(10));  // the kubelet's last probe, still open
  Add(open, "127.0.0.2", 6, milliseconds(5));   // a flood, all of it new
  Add(open, "127.0.0.1", 1, milliseconds(1));
  // The flood's oldest, however young: the newcomer's address would hold 3, it 6.
  CHECK(SlotForNewcomer(open, Peer("127.0.0.1"), kNow, kReplaceAfter) == 1);
  // A third address too.
  CHECK(SlotForNewcomer(open, Peer("127.0.0.3"), kNow, kReplaceAfter) == 1);
}

TEST_CASE("slots: of several addresses holding the most, the oldest connection goes") {
  std::vector<OpenConnection> open;
  Add(open, "127.0.0.2", 1, milliseconds(9));
  Add(open, "127.0.0.3", 4, milliseconds(8));
  Add(open, "127.0.0.2", 3, milliseconds(7));
  CHECK(SlotForNewcomer(open, Peer("127.0.0.1"), kNow, kReplaceAfter) == 0);
}

TEST_CASE(
    "slots: an address holding the most replaces its own oldest once it has been open "
    "replace_after, and is refused before") {
  std::vector<OpenConnection> open;
  Add(open, "127.0.0.2", 1, kReplaceAfter);
  Add(open, "127.0.0.1", 1, milliseconds(1));
  Add(open, "127.0.0.2", 6, milliseconds(1));
  CHECK(SlotForNewcomer(open, Peer("127.0.0.2"), kNow, kReplaceAfter) == 0);
  open[0].accepted = kNow - kReplaceAfter + milliseconds(1);
  CHECK_FALSE(SlotForNewcomer(open, Peer("127.0.0.2"), kNow, kReplaceAfter).has_value());
  // One address alone: the same.
  std::vector<OpenConnection> alone;
  Add(alone, "127.0.0.1", 2, milliseconds(1));
  CHECK_FALSE(SlotForNewcomer(alone, Peer("127.0.0.1"), kNow, kReplaceAfter).has_value());
  alone[0].accepted = kNow - kReplaceAfter;
  CHECK(SlotForNewcomer(alone, Peer("127.0.0.1"), kNow, kReplaceAfter) == 0);
}

TEST_CASE(
    "slots: two addresses as big take nothing from each other without condition (no slot taken "
    "back and forth)") {
  std::vector<OpenConnection> open;
  Add(open, "127.0.0.2", 4, milliseconds(5));
  Add(open, "127.0.0.3", 3, milliseconds(4));
  Add(open, "127.0.0.1", 1, milliseconds(3));
  // 127.0.0.3 would hold 4, as many as 127.0.0.2: nothing young is taken.
  CHECK_FALSE(SlotForNewcomer(open, Peer("127.0.0.3"), kNow, kReplaceAfter).has_value());
  // Once old enough, the oldest of both goes (here 127.0.0.2's).
  for (auto& connection : open) connection.accepted -= kReplaceAfter;
  CHECK(SlotForNewcomer(open, Peer("127.0.0.3"), kNow, kReplaceAfter) == 0);
}

TEST_CASE("slots: as many addresses as slots, one each: a newcomer takes the oldest once old") {
  std::vector<OpenConnection> open;
  for (int i = 2; i < 6; ++i) Add(open, "127.0.0." + std::to_string(i), 1, milliseconds(10 - i));
  CHECK_FALSE(SlotForNewcomer(open, Peer("127.0.0.9"), kNow, kReplaceAfter).has_value());
  open[0].accepted -= kReplaceAfter;
  CHECK(SlotForNewcomer(open, Peer("127.0.0.9"), kNow, kReplaceAfter) == 0);
}

}  // namespace sharemgr
