#include "base/validate.h"

#include <arpa/inet.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace base {
namespace {

constexpr size_t kMaxLabel = 63;
constexpr size_t kMaxPath = 1024;
constexpr int64_t kMaxGraceSeconds = 3600;

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

std::string Printable(absl::string_view text) {
  return EscapeControl(text.substr(0, 80)) + (text.size() > 80 ? "..." : "");
}

}  // namespace

std::string EscapeControl(absl::string_view text) {
  std::string out;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      out += absl::StrCat("\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += ch;
    }
  }
  return out;
}

absl::Status ValidateVolumeName(absl::string_view name) {
  return ValidateLabelName("--volume", "volume name", name);
}

absl::Status ValidateLabelName(absl::string_view flag, absl::string_view what,
                               absl::string_view name) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", Printable(name), "' is not a valid ", what, ": ", why));
  };
  if (name.empty()) return bad("it is empty");
  if (name.size() > kMaxLabel) return bad("longer than 63 characters");
  for (char c : name) {
    if (!IsLowerAlnum(c) && c != '-') return bad("only lowercase letters, digits and '-' allowed");
  }
  if (!IsLowerAlnum(name.front()) || !IsLowerAlnum(name.back())) {
    return bad("must start and end with a letter or digit");
  }
  return absl::OkStatus();
}

absl::Status ValidatePodUid(absl::string_view uid) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pod-uid '", Printable(uid), "' is not a valid instance id: ", why));
  };
  if (uid.empty()) return bad("it is empty");
  if (uid.size() > 64) return bad("longer than 64 characters");
  for (char c : uid) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') {
      return bad("only letters, digits and '-' allowed");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateConfigPath(absl::string_view flag, absl::string_view path) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", Printable(path), "': ", why));
  };
  if (path.empty()) return bad("is empty");
  if (path.size() > kMaxPath) return bad("is longer than 1024 characters");
  if (path.front() != '/') return bad("must be an absolute path");
  for (char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return bad("contains a control character");
    if (absl::string_view("\"'{};#\\`$").find(ch) != absl::string_view::npos) {
      return bad(
          absl::StrCat("contains the character '", std::string(1, ch), "', which is not allowed"));
    }
  }
  for (absl::string_view part : absl::StrSplit(path.substr(1), '/')) {
    if (part == "." || part == "..") return bad("must not contain '.' or '..' components");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> NormalizePath(absl::string_view flag, absl::string_view path,
                                          bool resolve_symlinks) {
  if (auto s = ValidateConfigPath(flag, path); !s.ok()) return s;
  std::vector<std::string> parts =
      absl::StrSplit(path.substr(1), '/', absl::SkipEmpty());  // drops "//" and a trailing "/"
  // StrCat, not "/" + ...: GCC 12 at -O3 reports a false -Werror=restrict in
  // operator+(const char*, std::string&&).
  std::string normal = absl::StrCat("/", absl::StrJoin(parts, "/"));
  if (!resolve_symlinks) return normal;
  // Resolve the longest prefix that exists ("/" always does); the rest is created later.
  size_t existing = parts.size();
  std::string resolved = "/";
  for (; existing > 0; --existing) {
    const std::string prefix = absl::StrCat(
        "/", absl::StrJoin(parts.begin(), parts.begin() + static_cast<ptrdiff_t>(existing), "/"));
    char buf[PATH_MAX];
    if (realpath(prefix.c_str(), buf) != nullptr) {
      resolved = buf;
      break;
    }
    if (errno != ENOENT) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " '", Printable(path), "': ", prefix, ": ", std::strerror(errno)));
    }
  }
  for (size_t i = existing; i < parts.size(); ++i) {
    if (resolved != "/") resolved += "/";
    resolved += parts[i];
  }
  if (auto s = ValidateConfigPath(flag, resolved); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (what ", Printable(path), " resolves to)"));
  }
  return resolved;
}

namespace {

// inet_pton reads a C string: a NUL inside would end the address there and
// let whatever follows it through (into ganesha.conf). `out` gets the address
// in network order (4 bytes for AF_INET, 16 for AF_INET6).
bool ParseAddress(int family, absl::string_view address, unsigned char* out) {
  if (address.find('\0') != absl::string_view::npos) return false;
  const std::string text(address);
  return inet_pton(family, text.c_str(), out) == 1;
}

bool IsAddress(int family, absl::string_view address) {
  unsigned char buf[sizeof(in6_addr)];
  return ParseAddress(family, address, buf);
}

}  // namespace

absl::Status ValidateIpAddress(absl::string_view flag, absl::string_view address) {
  if (IsAddress(AF_INET, address) || IsAddress(AF_INET6, address)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " '", Printable(address), "' is not an IPv4 or IPv6 address"));
}

namespace {

// An address (prefix = its full length) or a CIDR network.
struct IpNetwork {
  int family = AF_UNSPEC;
  unsigned char bytes[sizeof(in6_addr)] = {};
  int prefix = 0;
};

std::optional<IpNetwork> ParseNetwork(absl::string_view text) {
  const size_t slash = text.find('/');
  const absl::string_view address = text.substr(0, slash);
  IpNetwork net;
  if (ParseAddress(AF_INET, address, net.bytes)) {
    net.family = AF_INET;
    net.prefix = 32;
  } else if (ParseAddress(AF_INET6, address, net.bytes)) {
    net.family = AF_INET6;
    net.prefix = 128;
  } else {
    return std::nullopt;
  }
  if (slash == absl::string_view::npos) return net;
  const absl::string_view digits = text.substr(slash + 1);
  int prefix = 0;
  if (digits.empty() || digits.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(digits, &prefix) || prefix > net.prefix) {
    return std::nullopt;
  }
  net.prefix = prefix;
  return net;
}

bool SameLeadingBits(const unsigned char* a, const unsigned char* b, int bits) {
  for (int i = 0; i < bits; ++i) {
    const int shift = 7 - i % 8;
    if (((a[i / 8] >> shift) & 1) != ((b[i / 8] >> shift) & 1)) return false;
  }
  return true;
}

// Whether `net` holds any loopback address: 127.0.0.0/8, ::1, or 127.0.0.0/8
// mapped into IPv6 (::ffff:127.0.0.0/104, how an IPv4 caller of a dual-stack
// socket appears). Two networks share an address iff they agree on the
// shorter prefix, so 0.0.0.0/0 and ::/0 hold loopback too.
bool HoldsLoopback(const IpNetwork& net) {
  static constexpr IpNetwork kLoopback[] = {
      {AF_INET, {127}, 8},
      {AF_INET6, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128},
      {AF_INET6, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127}, 104},
  };
  for (const IpNetwork& loopback : kLoopback) {
    if (net.family == loopback.family &&
        SameLeadingBits(net.bytes, loopback.bytes, std::min(net.prefix, loopback.prefix))) {
      return true;
    }
  }
  return false;
}

// A number as C (and inet_aton) writes it: decimal, octal with a leading 0,
// or hex after 0x, digits optional there ("0x" is 0 to inet_aton).
bool IsCNumber(absl::string_view text) {
  if (absl::StartsWithIgnoreCase(text, "0x")) {
    return text.substr(2).find_first_not_of("0123456789abcdefABCDEF") == absl::string_view::npos;
  }
  return !text.empty() && text.find_first_not_of("0123456789") == absl::string_view::npos;
}

bool IsHostName(absl::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (absl::string_view label : absl::StrSplit(name, '.')) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char ch : label) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(ch)) && ch != '-') return false;
    }
  }
  return true;
}

// Names the resolver answers with loopback by itself: /etc/hosts on Debian
// (localhost, ip6-localhost, ip6-loopback) and RHEL (localhost4/6 and their
// .localdomain forms), RFC 6761's *.localhost, and the localhost.<domain>
// many DNS zones carry.
bool IsLoopbackName(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  const absl::string_view text = lower;
  const absl::string_view first = text.substr(0, text.find('.'));
  const absl::string_view top = text.substr(text.rfind('.') + 1);
  return first == "localhost" || first == "localhost4" || first == "localhost6" ||
         top == "localhost" || text == "ip6-localhost" || text == "ip6-loopback";
}

}  // namespace

absl::Status ValidateNfsClient(absl::string_view flag, absl::string_view client) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " '", Printable(client), "' ", why));
  };
  // The export probe reads from loopback with metadata access only, in a
  // CLIENT block after this list: the first block that matches wins, so an
  // entry holding loopback would give every process in the pod (and any
  // port-forward) the list's read-write access.
  const std::string loopback = absl::StrCat(
      "covers loopback (127.0.0.0/8, ::1), which only share-manager's own export probe may use "
      "(metadata only); without ",
      flag, " every client may mount");
  if (const auto network = ParseNetwork(client)) {
    // ganesha's config lexer reads a bare 0.0.0.0 as its "*": every client.
    if (client == "0.0.0.0" || HoldsLoopback(*network)) return bad(loopback);
    return absl::OkStatus();
  }
  // inet_aton, which ganesha's name lookup (getaddrinfo) falls back on, reads
  // numbers in C's spellings as an address: 127.1, 0x7f.1, 2130706433 and
  // 0177.0.0.1 are all 127.0.0.1. Each such spelling ends in a number, and a
  // name's last label never is one, so what ends in a number and is not the
  // strict address inet_pton reads is refused.
  if (IsCNumber(client.substr(client.rfind('.') + 1))) {
    return bad(
        "is not a strict IP address (IPv4: four decimal numbers 0-255, no leading zeros) nor a "
        "host name (whose last label is never a number)");
  }
  if (!IsHostName(client)) return bad("is not an IP address, a CIDR network or a host name");
  if (IsLoopbackName(client)) return bad(loopback);
  return absl::OkStatus();
}

absl::Status ValidatePort(absl::string_view flag, int64_t port) {
  if (port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", port, " is not a port (1-65535)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateListen(absl::string_view flag, const std::string& listen) {
  const auto colon = listen.rfind(':');
  int64_t port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", listen, "' must be HOST:PORT, e.g. 0.0.0.0:9600"));
  }
  if (auto s = ValidatePort(flag, port); !s.ok()) return s;
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "localhost") return absl::OkStatus();
  return ValidateIpAddress(flag, host);
}

absl::Status ValidateOption(absl::string_view flag, absl::string_view value,
                            absl::string_view forbidden) {
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " is empty"));
  for (char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f || forbidden.find(ch) != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " '", Printable(value), "' contains a character that is not allowed"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateGraceAndLease(int64_t grace_seconds, int64_t lease_seconds) {
  if (lease_seconds < 1) {
    return absl::InvalidArgumentError("--lease-lifetime must be at least 1 second");
  }
  if (grace_seconds > kMaxGraceSeconds) {
    return absl::InvalidArgumentError("--grace-period must be at most 3600 seconds");
  }
  if (grace_seconds < lease_seconds) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grace-period (", grace_seconds, "s) must be >= --lease-lifetime (",
                     lease_seconds, "s) so clients can reclaim their state after a restart"));
  }
  return absl::OkStatus();
}

}  // namespace base
