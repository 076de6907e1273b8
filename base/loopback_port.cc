#include "base/loopback_port.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "base/unique_fd.h"

namespace base {

uint16_t FreeLoopbackPort() {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (!fd || bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return 0;
  }
  return ntohs(addr.sin_port);
}

absl::StatusOr<PortRange> ParsePortRange(absl::string_view text) {
  const std::vector<std::string> parts = absl::StrSplit(text, '-');
  uint32_t first = 0, last = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &first) ||
      !absl::SimpleAtoi(parts[1], &last) || first < 1 || first > last || last > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid port range '", text, "' (expected FIRST-LAST, 1 <= FIRST <= LAST <= 65535)"));
  }
  return PortRange{static_cast<uint16_t>(first), static_cast<uint16_t>(last)};
}

absl::StatusOr<PortRange> EphemeralPortRange() {
  constexpr char kPath[] = "/proc/sys/net/ipv4/ip_local_port_range";
  auto text = ReadFile(kPath);
  if (!text.ok()) return text.status();
  // "32768\t60999\n"
  const std::vector<std::string> parts =
      absl::StrSplit(absl::StripAsciiWhitespace(*text), absl::ByAnyChar(" \t"), absl::SkipEmpty());
  uint32_t first = 0, last = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &first) ||
      !absl::SimpleAtoi(parts[1], &last) || first > last || last > 65535) {
    return absl::DataLossError(absl::StrCat(kPath, ": unexpected '", *text, "'"));
  }
  return PortRange{static_cast<uint16_t>(first), static_cast<uint16_t>(last)};
}

}  // namespace base
