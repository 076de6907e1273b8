#include "base/validate.h"

#include <arpa/inet.h>
#include <limits.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
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
  std::string out;
  for (char ch : text.substr(0, 80)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      out += absl::StrCat("\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += ch;
    }
  }
  if (text.size() > 80) out += "...";
  return out;
}

}  // namespace

absl::Status ValidateVolumeName(absl::string_view name) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--volume '", Printable(name), "' is not a valid volume name: ", why));
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
// let whatever follows it through (into ganesha.conf).
bool IsAddress(int family, absl::string_view address) {
  if (address.find('\0') != absl::string_view::npos) return false;
  const std::string text(address);
  in6_addr buf{};
  return inet_pton(family, text.c_str(), &buf) == 1;
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

bool IsHostName(absl::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  // "10.0.0.300" is a mistyped address, not a name: a top label is never all digits.
  const absl::string_view top = name.substr(name.rfind('.') + 1);
  if (top.find_first_not_of("0123456789") == absl::string_view::npos) return false;
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

bool IsNetwork(absl::string_view text) {
  const size_t slash = text.find('/');
  if (slash == absl::string_view::npos) return false;
  const absl::string_view address = text.substr(0, slash);
  int prefix = 0;
  if (!absl::SimpleAtoi(text.substr(slash + 1), &prefix) ||
      text.substr(slash + 1).find_first_not_of("0123456789") != absl::string_view::npos) {
    return false;
  }
  if (IsAddress(AF_INET, address)) return prefix >= 0 && prefix <= 32;
  if (IsAddress(AF_INET6, address)) return prefix >= 0 && prefix <= 128;
  return false;
}

}  // namespace

absl::Status ValidateNfsClient(absl::string_view flag, absl::string_view client) {
  if (ValidateIpAddress(flag, client).ok() || IsNetwork(client) || IsHostName(client)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " '", Printable(client), "' is not an IP address, a CIDR network or a host name"));
}

absl::Status ValidatePort(absl::string_view flag, int64_t port) {
  if (port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", port, " is not a port (1-65535)"));
  }
  return absl::OkStatus();
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
