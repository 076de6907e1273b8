#include "supervisor/nfs_null_probe.h"

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "base/unique_fd.h"
#include "tests/support/daemon_process.h"
#include "tests/support/descriptor_shortage.h"

namespace supervisor {
namespace {

using std::chrono::milliseconds;

std::vector<uint8_t> Words(std::initializer_list<uint32_t> words) {
  std::vector<uint8_t> out;
  for (uint32_t w : words) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(w >> shift));
  }
  return out;
}

// A one-connection RPC server on 127.0.0.1 that answers as told.
class FakeRpcServer {
 public:
  enum class Mode { kAnswer, kSilent, kWrongXid, kDenied, kClose, kDelay };
  explicit FakeRpcServer(Mode mode) : mode_(mode) {
    fd_.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    REQUIRE(bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(listen(fd_.get(), 4) == 0);
    getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeRpcServer() {
    shutdown(fd_.get(), SHUT_RDWR);
    thread_.join();
  }
  uint16_t port() const { return port_; }

 private:
  void Serve() {
    // accept4() takes its descriptor before it waits: while a test has used
    // them all up it fails at once, and is tried again.
    base::UniqueFd conn(accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    while (!conn && errno == EMFILE) {
      std::this_thread::sleep_for(milliseconds(5));
      conn.reset(accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    }
    if (!conn) return;  // shut down
    uint8_t call[44];
    size_t got = 0;
    while (got < sizeof(call)) {
      const ssize_t n = read(conn.get(), call + got, sizeof(call) - got);
      if (n <= 0) return;
      got += static_cast<size_t>(n);
    }
    const uint32_t xid = (uint32_t{call[4]} << 24) | (uint32_t{call[5]} << 16) |
                         (uint32_t{call[6]} << 8) | uint32_t{call[7]};
    std::vector<uint8_t> reply;
    switch (mode_) {
      case Mode::kAnswer:
        reply = Words({0x80000000u | 24, xid, 1, 0, 0, 0, 0});
        break;
      case Mode::kWrongXid:
        reply = Words({0x80000000u | 24, xid + 1, 1, 0, 0, 0, 0});
        break;
      case Mode::kDenied:
        reply = Words({0x80000000u | 20, xid, 1, 1, 0, 0});
        break;
      case Mode::kDelay:  // a COMPOUND answered NFS4ERR_DELAY, no tag, no results
        reply = Words({0x80000000u | 36, xid, 1, 0, 0, 0, 0, 10008, 0, 0});
        break;
      case Mode::kClose:
        return;
      case Mode::kSilent:
        // Hold the connection open, like a SIGSTOPped ganesha whose kernel accepted it.
        char buf[1];
        (void)read(conn.get(), buf, 1);
        return;
    }
    (void)write(conn.get(), reply.data(), reply.size());
  }

  Mode mode_;
  base::UniqueFd fd_;
  uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace

TEST_CASE("the NULL call is RFC 5531 on the wire: record mark, CALL, NFS v4 proc 0, AUTH_NONE") {
  const auto call = EncodeNullCall(0x01020304);
  CHECK(call == Words({0x80000000u | 40, 0x01020304, 0, 2, 100003, 4, 0, 0, 0, 0, 0}));
}

TEST_CASE("ParseNullReply accepts SUCCESS and explains everything else") {
  CHECK(ParseNullReply(Words({7, 1, 0, 0, 0, 0}), 7).ok());
  // An AUTH_SHORT-ish verifier with a body is skipped, padded to 4 bytes.
  CHECK(ParseNullReply(Words({7, 1, 0, 2, 3, 0xAABBCC00, 0}), 7).ok());
  CHECK(ParseNullReply(Words({8, 1, 0, 0, 0, 0}), 7).code() == absl::StatusCode::kDataLoss);
  CHECK(ParseNullReply(Words({7, 0, 0, 0, 0, 0}), 7).code() == absl::StatusCode::kDataLoss);
  CHECK(ParseNullReply(Words({7, 1, 1, 0, 0}), 7).code() == absl::StatusCode::kPermissionDenied);
  const auto prog_unavail = ParseNullReply(Words({7, 1, 0, 0, 0, 1}), 7);
  CHECK(prog_unavail.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(prog_unavail.message()).find("accept_stat 1") != std::string::npos);
  CHECK(ParseNullReply(Words({7, 1}), 7).code() == absl::StatusCode::kDataLoss);
  CHECK(ParseNullReply(Words({7, 1, 0, 0, 100}), 7).code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("the export LOOKUP is a COMPOUND {PUTROOTFH, LOOKUP} as root") {
  const auto call = EncodeLookupCall(9, "pvc-1");
  // mark, xid, CALL, rpcvers 2, NFS, v4, proc 1 (COMPOUND), AUTH_SYS
  const auto head = Words({0, 9, 0, 2, 100003, 4, 1, 1});
  REQUIRE(call.size() > head.size());
  CHECK(std::equal(head.begin() + 4, head.end(), call.begin() + 4));
  // ... ends with: 2 ops, PUTROOTFH (24), LOOKUP (15), "pvc-1" padded to 8 bytes
  const auto tail = Words({2, 24, 15, 5});
  const std::vector<uint8_t> name = {'p', 'v', 'c', '-', '1', 0, 0, 0};
  std::vector<uint8_t> expected_tail = tail;
  expected_tail.insert(expected_tail.end(), name.begin(), name.end());
  CHECK(std::equal(expected_tail.rbegin(), expected_tail.rend(), call.rbegin()));
  const uint32_t length =
      (uint32_t{call[0]} << 24 | uint32_t{call[1]} << 16 | uint32_t{call[2]} << 8 | call[3]) &
      0x7fffffff;
  CHECK(length == call.size() - 4);
}

TEST_CASE("ParseRecordMark reads the length a record mark announces, up to the reply limit") {
  auto mark = [](uint32_t word) {
    const auto bytes = Words({word});
    return ParseRecordMark(std::span<const uint8_t, 4>(bytes.data(), 4));
  };
  CHECK(*mark(0x80000000u | 24) == 24);
  CHECK(*mark(0) == 0);
  CHECK(*mark(0x80000000u | 1024) == 1024);
  CHECK(mark(0x80000000u | 1025).status().code() == absl::StatusCode::kDataLoss);
  CHECK(mark(0xffffffffu).status().code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("ParseCompoundStatus reads the nfsstat4 after an accepted reply") {
  CHECK(*ParseCompoundStatus(Words({9, 1, 0, 0, 0, 0, 0, 0, 0}), 9) == 0);
  CHECK(*ParseCompoundStatus(Words({9, 1, 0, 0, 0, 0, 2, 0, 1}), 9) == 2);
  CHECK(ParseCompoundStatus(Words({9, 1, 0, 0, 0, 0}), 9).status().code() ==
        absl::StatusCode::kDataLoss);
  CHECK(ParseCompoundStatus(Words({8, 1, 0, 0, 0, 0, 0}), 9).status().code() ==
        absl::StatusCode::kDataLoss);
}

TEST_CASE("ProbeNfsNull against a server that answers") {
  FakeRpcServer server(FakeRpcServer::Mode::kAnswer);
  CHECK(ProbeNfsNull("127.0.0.1", server.port(), milliseconds(1000)).ok());
}

TEST_CASE("ProbeNfsNull rejects a reply for another call") {
  FakeRpcServer server(FakeRpcServer::Mode::kWrongXid);
  CHECK(ProbeNfsNull("127.0.0.1", server.port(), milliseconds(1000)).code() ==
        absl::StatusCode::kDataLoss);
}

TEST_CASE("ProbeNfsNull reports a denied call and a closed connection") {
  {
    FakeRpcServer server(FakeRpcServer::Mode::kDenied);
    CHECK(ProbeNfsNull("127.0.0.1", server.port(), milliseconds(1000)).code() ==
          absl::StatusCode::kPermissionDenied);
  }
  FakeRpcServer server(FakeRpcServer::Mode::kClose);
  CHECK(ProbeNfsNull("127.0.0.1", server.port(), milliseconds(1000)).code() ==
        absl::StatusCode::kUnavailable);
}

TEST_CASE("ProbeNfsNull says the connection was refused when nothing listens") {
  const auto port = base::FreeLoopbackPort();
  const auto result = ProbeNfsNull("127.0.0.1", port, milliseconds(2000));
  CHECK(result.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(result.message()).find("refused") != std::string::npos);
}

TEST_CASE("ProbeNfsNull gives up at its deadline when the peer accepts but never answers") {
  FakeRpcServer server(FakeRpcServer::Mode::kSilent);
  const auto start = base::Clock::now();
  const auto result = ProbeNfsNull("127.0.0.1", server.port(), milliseconds(200));
  const auto took = base::Clock::now() - start;
  CHECK(result.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(took >= milliseconds(190));
  // Generous bound: only proves the probe is bounded, not how fast this machine is.
  CHECK(took < milliseconds(2000));
}

TEST_CASE(
    "out of file descriptors here, the probes say so (ResourceExhausted), not that the server "
    "failed") {
  FakeRpcServer server(FakeRpcServer::Mode::kAnswer);
  absl::Status null, lookup;
  {
    testing_support::DescriptorShortage shortage(128);
    null = ProbeNfsNull("127.0.0.1", server.port(), milliseconds(1000));
    lookup = ProbeNfsExport("127.0.0.1", server.port(), "pvc", milliseconds(1000));
  }
  CHECK(null.code() == absl::StatusCode::kResourceExhausted);
  CHECK(std::string(null.message()).find("Too many open files") != std::string::npos);
  CHECK(lookup.code() == absl::StatusCode::kResourceExhausted);
  // With descriptors back, the same server answers.
  const auto after = ProbeNfsNull("127.0.0.1", server.port(), milliseconds(1000));
  CHECK_MESSAGE(after.ok(), after.ToString());
}

TEST_CASE("a LOOKUP answered NFS4ERR_DELAY is an answer (FailedPrecondition), not a failure") {
  FakeRpcServer server(FakeRpcServer::Mode::kDelay);
  const auto lookup = ProbeNfsExport("127.0.0.1", server.port(), "pvc", milliseconds(1000));
  CHECK_MESSAGE(lookup.code() == absl::StatusCode::kFailedPrecondition, lookup.ToString());
  CHECK(std::string(lookup.message()).find("NFS4ERR_DELAY") != std::string::npos);
}

TEST_CASE("ProbeNfsNull refuses a host that is not an IP literal") {
  CHECK(ProbeNfsNull("example", 1, milliseconds(100)).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace supervisor
