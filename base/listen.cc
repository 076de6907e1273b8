#include "base/listen.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace base {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// TCP_LISTEN in /proc/net/tcp's "st" column.
constexpr char kListenState[] = "0A";

// An address of /proc/net/tcp{,6}: each 32-bit word printed in hex as the
// kernel holds it (network byte order read as a host integer).
bool ParseProcAddress(absl::string_view hex, std::vector<uint8_t>& bytes) {
  if (hex.size() != 8 && hex.size() != 32) return false;
  bytes.clear();
  for (size_t at = 0; at < hex.size(); at += 8) {
    uint32_t word = 0;
    if (!absl::SimpleHexAtoi(hex.substr(at, 8), &word)) return false;
    std::array<uint8_t, 4> raw{};
    std::memcpy(raw.data(), &word, sizeof(word));
    bytes.insert(bytes.end(), raw.begin(), raw.end());
  }
  return true;
}

struct Listener {
  std::vector<uint8_t> address;
  uint64_t inode = 0;
};

// The sockets listening on `port` in one of /proc/<pid>/net/tcp{,6}.
std::vector<Listener> ListenersOn(const std::string& table, uint16_t port) {
  std::vector<Listener> out;
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (fields.size() < 10 || fields[3] != kListenState) continue;
    const std::vector<absl::string_view> local = absl::StrSplit(fields[1], ':');
    uint32_t local_port = 0;
    Listener listener;
    if (local.size() != 2 || !absl::SimpleHexAtoi(local[1], &local_port) || local_port != port ||
        !ParseProcAddress(local[0], listener.address) ||
        !absl::SimpleAtoi(fields[9], &listener.inode)) {
      continue;
    }
    out.push_back(std::move(listener));
  }
  return out;
}

// The socket inodes among pid's open files.
absl::StatusOr<std::set<uint64_t>> SocketInodes(pid_t pid) {
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Errno(absl::StrCat("opendir ", dir));
  std::set<uint64_t> inodes;
  constexpr absl::string_view kPrefix = "socket:[";
  while (const dirent* entry = readdir(d)) {
    char target[64];
    const std::string link = absl::StrCat(dir, "/", entry->d_name);
    const ssize_t n = readlink(link.c_str(), target, sizeof(target));
    if (n <= 0 || static_cast<size_t>(n) >= sizeof(target)) continue;
    const absl::string_view text(target, static_cast<size_t>(n));
    uint64_t inode = 0;
    if (absl::StartsWith(text, kPrefix) && absl::EndsWith(text, "]") &&
        absl::SimpleAtoi(text.substr(kPrefix.size(), text.size() - kPrefix.size() - 1), &inode)) {
      inodes.insert(inode);
    }
  }
  closedir(d);
  return inodes;
}

}  // namespace

absl::StatusOr<UniqueFd> ListenTcp(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", host_port, "' is not HOST:PORT"));
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") host = "127.0.0.1";
  const bool wildcard = host.empty() || host == "0.0.0.0" || host == "::";
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (wildcard || inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v6);
  } else if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("'", host, "' is not an IP address"));
  }
  const int flags = SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC;
  UniqueFd fd(socket(addr.ss_family, flags, 0));
  if (!fd && wildcard && errno == EAFNOSUPPORT) {  // no IPv6 here: IPv4's wildcard
    addr = {};
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
    fd.reset(socket(AF_INET, flags, 0));
  }
  if (!fd) return Errno("socket");
  const int zero = 0;
  const int one = 1;
  if (addr.ss_family == AF_INET6 && wildcard) {
    setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Errno(absl::StrCat("bind ", host_port));
  }
  if (listen(fd.get(), SOMAXCONN) != 0) return Errno(absl::StrCat("listen ", host_port));
  return fd;
}

absl::Status CheckCanListenTcp(const std::string& host_port) {
  return ListenTcp(host_port).status();
}

std::string JoinHostPort(const std::string& host, uint16_t port) {
  return host.find(':') == std::string::npos ? absl::StrCat(host, ":", port)
                                             : absl::StrCat("[", host, "]:", port);
}

absl::Status CheckListenerOwner(pid_t pid, const std::string& host, uint16_t port) {
  in_addr v4{};
  in6_addr v6{};
  std::vector<uint8_t> want4, want6;  // host as each table spells it
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    const auto* b = reinterpret_cast<const uint8_t*>(&v4);
    want4.assign(b, b + sizeof(v4));
    // As a dual-stack IPv6 socket sees an IPv4 peer: ::ffff:a.b.c.d.
    want6.assign(10, 0);
    want6.insert(want6.end(), {0xff, 0xff});
    want6.insert(want6.end(), want4.begin(), want4.end());
  } else if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    const auto* b = reinterpret_cast<const uint8_t*>(&v6);
    want6.assign(b, b + sizeof(v6));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("'", host, "' is not an IP address"));
  }
  // Listeners a connection to host:port may reach: on that address, or on
  // the wildcard of either family (IPv6's takes IPv4 too unless V6ONLY,
  // which the table does not show: it counts, the stricter answer).
  std::vector<Listener> reached;
  for (const auto& [table, want, any_size] :
       {std::tuple{"tcp", want4, size_t{4}}, std::tuple{"tcp6", want6, size_t{16}}}) {
    if (want.empty() && any_size == 4) continue;
    const std::string path = absl::StrCat("/proc/", pid, "/net/", table);
    if (access(path.c_str(), R_OK) != 0) {
      if (errno == ENOENT && any_size == 16) continue;  // a kernel without IPv6
      return Errno(absl::StrCat("cannot read ", path));
    }
    for (auto& listener : ListenersOn(path, port)) {
      const bool any = listener.address == std::vector<uint8_t>(any_size, 0);
      if (any || listener.address == want) reached.push_back(std::move(listener));
    }
  }
  const std::string where = JoinHostPort(host, port);
  if (reached.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no socket of pid ", pid, "'s network namespace listens on ", where));
  }
  auto inodes = SocketInodes(pid);
  if (!inodes.ok()) return inodes.status();
  for (const auto& listener : reached) {
    if (!inodes->contains(listener.inode)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the socket listening on ", where, " (inode ", listener.inode,
                       ") belongs to another process, not to pid ", pid));
    }
  }
  return absl::OkStatus();
}

}  // namespace base
