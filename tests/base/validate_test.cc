#include "base/validate.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace base {

TEST_CASE("volume names are DNS-1123 labels") {
  for (const char* good : {"a", "pvc-1", "0abc", "pvc-3f2b6c1e-8d7a-4c1b-9b8e-2f1d5a6c7b8d"}) {
    CAPTURE(good);
    CHECK(base::ValidateVolumeName(good).ok());
  }
  const std::string too_long(64, 'a');
  for (const std::string& bad :
       {std::string(""), too_long, std::string("-pvc"), std::string("pvc-"), std::string("PVC"),
        std::string("pvc_1"), std::string("pvc.1"), std::string("pvc 1"), std::string("pvc/1"),
        std::string("pvc\n1"), std::string("pvc\"1"), std::string("pvc}1")}) {
    CAPTURE(bad);
    const auto status = base::ValidateVolumeName(bad);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(status.message()).find("--volume") == 0);
    CHECK(std::string(status.message()).find('\n') == std::string::npos);
  }
  CHECK(base::ValidateVolumeName(std::string(63, 'a')).ok());
}

TEST_CASE("instance ids (--pod-uid) are 1-64 letters, digits and dashes") {
  for (const char* good : {"a", "3f2b6c1e-8d7a-4c1b-9b8e-2f1d5a6c7b8d", "ABC-123"}) {
    CAPTURE(good);
    CHECK(base::ValidatePodUid(good).ok());
  }
  CHECK(base::ValidatePodUid(std::string(64, 'a')).ok());
  for (const std::string& bad : {std::string(""), std::string(65, 'a'), std::string("a b"),
                                 std::string("a_b"), std::string("a\nb"), std::string("a/b")}) {
    CAPTURE(bad);
    const auto status = base::ValidatePodUid(bad);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(status.message()).find("--pod-uid") == 0);
  }
}

TEST_CASE("config paths are absolute and cannot escape a quoted ganesha.conf string") {
  for (const char* good : {"/export/pvc-1", "/", "/a b/c", "/var/lib/share-manager/x.y"}) {
    CAPTURE(good);
    CHECK(base::ValidateConfigPath("--export-dir", good).ok());
  }
  for (const std::string& bad : {
           std::string(""),
           std::string("relative/path"),
           std::string("/export/../etc"),
           std::string("/export/./x"),
           std::string("/export/.."),
           std::string("/export\"; } EXPORT { Path = \"/"),
           std::string("/export/x'y"),
           std::string("/export/{x}"),
           std::string("/export/a;b"),
           std::string("/export/a#b"),
           std::string("/export/a\\b"),
           std::string("/export/a\nb"),
           std::string("/export/a\tb"),
           std::string("/export/a\x7f"),
           std::string("/export/a\0b", 10),
           std::string("/") + std::string(1100, 'a'),
       }) {
    CAPTURE(bad);
    const auto status = base::ValidateConfigPath("--export-dir", bad);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    // One line, printable, naming the flag.
    const std::string message(status.message());
    CHECK(message.find("--export-dir") == 0);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("addresses, ports, grace and lease") {
  CHECK(base::ValidateIpAddress("--nfs-address", "127.0.0.1").ok());
  CHECK(base::ValidateIpAddress("--nfs-address", "::1").ok());
  CHECK_FALSE(base::ValidateIpAddress("--nfs-address", "localhost").ok());
  CHECK_FALSE(base::ValidateIpAddress("--nfs-address", "127.0.0.1; }").ok());
  CHECK(base::ValidatePort("--nfs-port", 20490).ok());
  CHECK_FALSE(base::ValidatePort("--nfs-port", 0).ok());
  CHECK_FALSE(base::ValidatePort("--nfs-port", 65536).ok());
  CHECK(base::ValidateGraceAndLease(90, 60).ok());
  CHECK(base::ValidateGraceAndLease(2, 2).ok());
  CHECK_FALSE(base::ValidateGraceAndLease(30, 60).ok());
  CHECK_FALSE(base::ValidateGraceAndLease(0, 0).ok());
  CHECK_FALSE(base::ValidateGraceAndLease(4000, 60).ok());
}

TEST_CASE(
    "NFS clients are addresses, CIDR networks or host names, nothing that could break the config") {
  for (const char* good : {"10.0.0.7", "fd00::1", "10.42.0.0/16", "128.0.0.0/1", "fd00::/64",
                           "node-1", "node-1.cluster.local", "126.255.255.255", "128.0.0.0", "::2",
                           "::ffff:10.0.0.1", "cafe", "a1.b2"}) {
    CHECK_MESSAGE(base::ValidateNfsClient("--nfs-clients", good).ok(), good);
  }
  for (const char* bad :
       {"", "*", "10.0.0.0/33", "fd00::/129", "10.0.0.0/", "10.0.0.0/x", "10.0.0.300", "a,b", "a b",
        "host;", "@netgroup", "-node", "node-", "a..b", "\"quoted\"", "x}\nEXPORT{", "10.0.0.0/+8",
        // the manifests' placeholder (container/k8s): a pod shipped with it must not start
        "REPLACE_WITH_NODE_CIDR"}) {
    const auto status = base::ValidateNfsClient("--nfs-clients", bad);
    CHECK_MESSAGE(status.code() == absl::StatusCode::kInvalidArgument, bad);
    CHECK(std::string(status.message()).find("--nfs-clients") != std::string::npos);
  }
}

// The export probe reads from loopback with metadata access only, and the
// client list comes first in the export: an entry that reaches loopback would
// give any process in the pod the list's read-write access.
TEST_CASE("an NFS client is never loopback, however it is written") {
  const std::vector<std::string> loopback = {
      // addresses and networks holding 127.0.0.0/8 or ::1
      "127.0.0.1", "127.255.255.254", "127.0.0.0/8", "127.0.0.1/32", "126.0.0.0/7", "0.0.0.0/0",
      "::1", "::1/128", "::/0", "::/127", "::ffff:127.0.0.1", "::ffff:7f00:1", "::ffff:0:0/96",
      "0:0:0:0:0:0:0:1",
      // ganesha's wildcard for every client
      "0.0.0.0",
      // names the resolver answers with loopback by itself
      "localhost", "LocalHost", "localhost.localdomain", "localhost4", "localhost6.localdomain6",
      "ip6-localhost", "ip6-loopback", "app.localhost", "localhost.cluster.local"};
  for (const auto& client : loopback) {
    const auto status = base::ValidateNfsClient("--nfs-clients", client);
    CHECK_MESSAGE(status.code() == absl::StatusCode::kInvalidArgument, client);
    CHECK_MESSAGE(std::string(status.message()).find("covers loopback") != std::string::npos,
                  status.message());
  }
  // inet_aton (getaddrinfo's fallback, so ganesha's) reads the first ten as
  // 127.0.0.1; a name never ends in a number. No strict address, no name.
  for (const char* client :
       {"127.1", "127.0.1", "0x7f.1", "0x7f000001", "0X7F000001", "2130706433", "0177.0.0.1",
        "017700000001", "127.0.0.0x1", "0x7f.0.0.1", "1.0x7f", "0x", "node.0x1"}) {
    const auto status = base::ValidateNfsClient("--nfs-clients", client);
    CHECK_MESSAGE(status.code() == absl::StatusCode::kInvalidArgument, client);
    CHECK_MESSAGE(std::string(status.message()).find("nor a host name") != std::string::npos,
                  status.message());
  }
}

// Found by tests/fuzz (validate_fuzz): inet_pton stopped at the NUL and
// passed what followed it.
TEST_CASE("an address or network with a NUL inside is refused, whatever follows the NUL") {
  using std::string_literals::operator""s;
  for (const std::string& bad : {"::f\0f\x17\0"s, "10.0.0.1\0\n}"s, "10.0.0.0\0}/8"s}) {
    CHECK_FALSE(base::ValidateIpAddress("--nfs-address", bad).ok());
    CHECK_FALSE(base::ValidateNfsClient("--nfs-clients", bad).ok());
  }
}

TEST_CASE("EscapeControl spells control bytes out (a terminal escape cannot act), keeps UTF-8") {
  CHECK(EscapeControl("ok: caf\xc3\xa9") == "ok: caf\xc3\xa9");
  CHECK(EscapeControl("\x1b]52;c;aGk=\x07\nnext\x7f") == "\\x1b]52;c;aGk=\\x07\\x0anext\\x7f");
}

}  // namespace base
