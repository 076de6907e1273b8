// Input checks for everything that ends up in ganesha.conf or on a command
// line. Each returns InvalidArgument with a one-line message naming the flag.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace base {

// `text` with every control byte (newline too) spelled \xNN: for strings from
// elsewhere shown to people, whose terminal would act on escape sequences.
std::string EscapeControl(absl::string_view text);

// A Kubernetes object name usable as a DNS-1123 label: 1-63 characters of
// [a-z0-9-], starting and ending with an alphanumeric. The error names
// `flag` and says what the name is for ("--leader-lease 'X' is not a valid
// Lease name: ...").
absl::Status ValidateLabelName(absl::string_view flag, absl::string_view what,
                               absl::string_view name);
// ValidateLabelName for --volume.
absl::Status ValidateVolumeName(absl::string_view name);

// An absolute path with no "." or ".." component and none of the characters
// that could escape a quoted ganesha.conf string or break a line: quotes,
// braces, semicolons, '#', backslashes, whitespace other than space, control bytes.
absl::Status ValidateConfigPath(absl::string_view flag, absl::string_view path);

// ValidateConfigPath, then the one spelling the kernel uses for it: doubled
// and trailing slashes removed and, with `resolve_symlinks`, every existing
// component resolved (realpath of the longest existing prefix), so the path
// compares equal to a mount target in mountinfo. The result is validated again
// (a symlink may point anywhere).
absl::StatusOr<std::string> NormalizePath(absl::string_view flag, absl::string_view path,
                                          bool resolve_symlinks);

// An instance id (--pod-uid, e.g. a Kubernetes pod UID): 1-64 characters of
// [A-Za-z0-9-]; it is compared byte for byte, so no spelling variants.
absl::Status ValidatePodUid(absl::string_view uid);

// An IPv4 or IPv6 address literal.
absl::Status ValidateIpAddress(absl::string_view flag, absl::string_view address);

absl::Status ValidatePort(absl::string_view flag, int64_t port);

// A listen address: HOST:PORT, [V6]:PORT or :PORT (all interfaces), where
// HOST is an IP literal or localhost.
absl::Status ValidateListen(absl::string_view flag, const std::string& listen);

// An NFS client as ganesha's CLIENT block takes it: an IPv4 or IPv6 address,
// a network in CIDR form (10.0.0.0/8, fd00::/64) or a host name (DNS-1123
// subdomain). Nothing else: no wildcards, lists or netgroups. Never loopback
// (reserved to the export probe, metadata only): no address or network that
// holds 127.0.0.0/8 or ::1 (0.0.0.0/0 does), not 0.0.0.0 (ganesha's "every
// client"), no localhost name, and no name inet_aton reads as an address
// (127.1, 0x7f.1, 2130706433, 0177.0.0.1: a last label that is a number makes
// it no name at all). A name DNS resolves to loopback cannot be told here.
absl::Status ValidateNfsClient(absl::string_view flag, absl::string_view client);

// A non-empty option value with no control characters and none of `forbidden`
// (e.g. "," for a mount option, which libmount would split).
absl::Status ValidateOption(absl::string_view flag, absl::string_view value,
                            absl::string_view forbidden);

// NFSv4 grace must be at least the lease so clients can reclaim; neither may
// be 0 (a 0 lease makes every OPEN fail).
absl::Status ValidateGraceAndLease(int64_t grace_seconds, int64_t lease_seconds);

}  // namespace base
