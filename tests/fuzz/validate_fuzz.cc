// The checks every flag value and API field passes before it reaches
// ganesha.conf, a command line or a mount: durations, volume names, paths,
// pod uids, addresses, NFS clients and mount options. Input: one value
// (every check gets the whole input).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/clock.h"
#include "base/validate.h"
#include "tests/fuzz/fuzz_input.h"

using fuzz::Check;

namespace {

bool OnlyChars(absl::string_view text, absl::string_view allowed_punct, bool upper = true) {
  for (char c : text) {
    const bool alnum =
        (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (upper && c >= 'A' && c <= 'Z');
    if (!alnum && allowed_punct.find(c) == absl::string_view::npos) return false;
  }
  return true;
}

bool NoControl(absl::string_view text) {
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

// What ValidateConfigPath promises: nothing that leaves a quoted string in
// ganesha.conf or breaks a line there.
void CheckConfigPath(absl::string_view path, absl::string_view what) {
  Check(!path.empty() && path.front() == '/' && path.size() <= 1024, "a config path is absolute",
        std::string(what));
  Check(NoControl(path), "a config path has no control byte", std::string(what));
  Check(path.find_first_of("\"'{};#\\`$") == absl::string_view::npos,
        "a config path has no quote, brace, ';', '#', '\\', '`' or '$'", std::string(what));
}

void Duration(std::string_view text) {
  auto d = base::ParseDuration(text);
  if (!d.ok()) return;
  Check(d->count() >= 0 && d->count() <= 86'400'000, "a duration is between 0 and a day",
        std::string(text));
  Check(!base::FormatDuration(*d).empty(), "a duration formats");
  auto again = base::ParseDuration(absl::StrCat(d->count(), "ms"));
  Check(again.ok() && *again == *d, "a duration reads back in ms", std::string(text));
}

void Paths(absl::string_view text) {
  const bool valid = base::ValidateConfigPath("--export-dir", text).ok();
  if (valid) CheckConfigPath(text, text);
  auto normal = base::NormalizePath("--export-dir", text, false);
  Check(normal.ok() == valid, "NormalizePath accepts what ValidateConfigPath accepts",
        std::string(text));
  if (normal.ok()) {
    CheckConfigPath(*normal, *normal);
    Check(normal->find("//") == std::string::npos, "a normal path has no '//'", *normal);
    Check(*normal == "/" || normal->back() != '/', "a normal path has no trailing '/'", *normal);
    auto twice = base::NormalizePath("--export-dir", *normal, false);
    Check(twice.ok() && *twice == *normal, "normalizing is idempotent", *normal);
  }
  // Resolving symlinks reads this machine's filesystem: its result is checked again.
  if (auto resolved = base::NormalizePath("--export-dir", text, true); resolved.ok()) {
    CheckConfigPath(*resolved, *resolved);
  }
}

// What ganesha makes of an accepted client (names through getaddrinfo, which
// reads IPv4 numbers as inet_aton does): never loopback, never read as an
// address in a spelling the strict parser refused, never the wildcard.
void NfsClientIsNoLoopback(const std::string& client) {
  in_addr v4{};
  if (inet_aton(client.c_str(), &v4) == 1) {
    in_addr strict{};
    Check(inet_pton(AF_INET, client.c_str(), &strict) == 1,
          "an accepted NFS client inet_aton reads is a strict dotted quad", client);
    Check((ntohl(v4.s_addr) >> 24) != 127, "an accepted NFS client is not in 127.0.0.0/8", client);
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, client.c_str(), &v6) == 1) {
    Check(!IN6_IS_ADDR_LOOPBACK(&v6) && !(IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127),
          "an accepted NFS client is not ::1 or ::ffff:127.0.0.0/104", client);
  }
  Check(absl::AsciiStrToLower(client) != "localhost", "an accepted NFS client is not localhost",
        client);
  Check(client != "0.0.0.0", "an accepted NFS client is not ganesha's every-client 0.0.0.0",
        client);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fuzz::Text(data, size);
  Duration(input);
  const absl::string_view text(input.data(), input.size());  // not std's in this abseil
  Paths(text);
  if (base::ValidateVolumeName(text).ok()) {
    Check(!text.empty() && text.size() <= 63 && OnlyChars(text, "-", false) &&
              text.front() != '-' && text.back() != '-',
          "a volume name is a DNS-1123 label", std::string(text));
  }
  if (base::ValidatePodUid(text).ok()) {
    Check(!text.empty() && text.size() <= 64 && OnlyChars(text, "-"),
          "a pod uid is letters, digits and '-'", std::string(text));
  }
  // Addresses and clients go into ganesha.conf unquoted.
  if (base::ValidateIpAddress("--nfs-address", text).ok()) {
    Check(!text.empty() && OnlyChars(text, ".:"), "an IP address is hex digits, '.' and ':'",
          std::string(text));
  }
  if (base::ValidateNfsClient("--nfs-clients", text).ok()) {
    Check(!text.empty() && OnlyChars(text, ".:/-"),
          "an NFS client is letters, digits, '.', ':', '/' and '-'", std::string(text));
    NfsClientIsNoLoopback(std::string(text));
  }
  if (base::ValidateOption("--mount-option", text, ",").ok()) {
    Check(!text.empty() && NoControl(text) && text.find(',') == absl::string_view::npos,
          "a mount option has no control byte and no ','", std::string(text));
  }
  return 0;
}
