#include "supervisor/nfs_null_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "supervisor/unique_fd.h"

namespace supervisor {
namespace {

constexpr uint32_t kLastFragment = 0x80000000u;
constexpr uint32_t kCall = 0;
constexpr uint32_t kReply = 1;
constexpr uint32_t kRpcVersion = 2;
constexpr uint32_t kMsgAccepted = 0;
constexpr uint32_t kAcceptSuccess = 0;
constexpr uint32_t kAuthNone = 0;
constexpr uint32_t kNullProcedure = 0;
// A NULL reply is 24 bytes; anything much larger is not a NULL reply.
constexpr uint32_t kMaxReply = 400;

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

class XdrReader {
 public:
  explicit XdrReader(std::span<const uint8_t> data) : data_(data) {}
  bool U32(uint32_t& v) {
    if (data_.size() - pos_ < 4) return false;
    v = (uint32_t{data_[pos_]} << 24) | (uint32_t{data_[pos_ + 1]} << 16) |
        (uint32_t{data_[pos_ + 2]} << 8) | uint32_t{data_[pos_ + 3]};
    pos_ += 4;
    return true;
  }
  bool Skip(size_t n) {
    const size_t padded = (n + 3) & ~size_t{3};
    if (data_.size() - pos_ < padded) return false;
    pos_ += padded;
    return true;
  }

 private:
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
};

absl::Status Errno(const char* what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

int RemainingMs(TimePoint deadline) {
  const auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for `events` on fd until the deadline.
absl::Status WaitFor(int fd, short events, TimePoint deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int timeout = RemainingMs(deadline);
    const int rc = poll(&p, 1, timeout);
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) return absl::DeadlineExceededError(absl::StrCat("no answer while ", what));
    if (errno != EINTR) return Errno("poll");
  }
}

absl::Status ReadExactly(int fd, uint8_t* buf, size_t len, TimePoint deadline) {
  size_t got = 0;
  while (got < len) {
    if (auto s = WaitFor(fd, POLLIN, deadline, "waiting for the NULL reply"); !s.ok()) return s;
    const ssize_t n = read(fd, buf + got, len - got);
    if (n == 0) return absl::UnavailableError("connection closed before the NULL reply");
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Errno("read");
    }
    got += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> Connect(const std::string& host, uint16_t port, TimePoint deadline) {
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    addr_len = sizeof(*v4);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    addr_len = sizeof(*v6);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("not an IP address: ", host));
  }
  UniqueFd fd(socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return Errno("socket");
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), addr_len) != 0) {
    if (errno != EINPROGRESS) return Errno("connect");
    if (auto s = WaitFor(fd.get(), POLLOUT, deadline, "connecting"); !s.ok()) return s;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      errno = err;
      return Errno("connect");
    }
  }
  return fd;
}

}  // namespace

std::vector<uint8_t> EncodeNullCall(uint32_t xid, uint32_t program, uint32_t version) {
  std::vector<uint8_t> body;
  PutU32(body, xid);
  PutU32(body, kCall);
  PutU32(body, kRpcVersion);
  PutU32(body, program);
  PutU32(body, version);
  PutU32(body, kNullProcedure);
  PutU32(body, kAuthNone);  // credential: flavor, empty body
  PutU32(body, 0);
  PutU32(body, kAuthNone);  // verifier: flavor, empty body
  PutU32(body, 0);
  std::vector<uint8_t> record;
  PutU32(record, kLastFragment | static_cast<uint32_t>(body.size()));
  record.insert(record.end(), body.begin(), body.end());
  return record;
}

absl::Status ParseNullReply(std::span<const uint8_t> record, uint32_t xid) {
  XdrReader r(record);
  uint32_t got_xid = 0, type = 0, reply_stat = 0, verf_flavor = 0, verf_len = 0, accept = 0;
  if (!r.U32(got_xid) || !r.U32(type) || !r.U32(reply_stat)) {
    return absl::DataLossError("truncated RPC reply header");
  }
  if (got_xid != xid) return absl::DataLossError(absl::StrCat("reply xid ", got_xid, " != ", xid));
  if (type != kReply)
    return absl::DataLossError(absl::StrCat("message type ", type, " is not a reply"));
  if (reply_stat != kMsgAccepted) return absl::PermissionDeniedError("RPC call denied");
  if (!r.U32(verf_flavor) || !r.U32(verf_len) || !r.Skip(verf_len) || !r.U32(accept)) {
    return absl::DataLossError("truncated accepted reply");
  }
  if (accept != kAcceptSuccess) {
    return absl::UnavailableError(absl::StrCat("RPC not accepted: accept_stat ", accept));
  }
  return absl::OkStatus();
}

absl::Status ProbeNfsNull(const std::string& host, uint16_t port, Duration timeout) {
  static std::atomic<uint32_t> next_xid{static_cast<uint32_t>(getpid()) << 16};
  const TimePoint deadline = Clock::now() + timeout;
  auto fd = Connect(host, port, deadline);
  if (!fd.ok()) return fd.status();
  const uint32_t xid = next_xid.fetch_add(1);
  const auto call = EncodeNullCall(xid);
  size_t sent = 0;
  while (sent < call.size()) {
    if (auto s = WaitFor(fd->get(), POLLOUT, deadline, "sending NULL"); !s.ok()) return s;
    const ssize_t n = send(fd->get(), call.data() + sent, call.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Errno("send");
    }
    sent += static_cast<size_t>(n);
  }
  uint8_t mark[4];
  if (auto s = ReadExactly(fd->get(), mark, sizeof(mark), deadline); !s.ok()) return s;
  const uint32_t header = (uint32_t{mark[0]} << 24) | (uint32_t{mark[1]} << 16) |
                          (uint32_t{mark[2]} << 8) | uint32_t{mark[3]};
  const uint32_t len = header & ~kLastFragment;
  if (len > kMaxReply) return absl::DataLossError(absl::StrCat("reply of ", len, " bytes"));
  std::vector<uint8_t> reply(len);
  if (auto s = ReadExactly(fd->get(), reply.data(), len, deadline); !s.ok()) return s;
  return ParseNullReply(reply, xid);
}

}  // namespace supervisor
