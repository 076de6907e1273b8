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
#include "base/socket_address.h"
#include "base/unique_fd.h"

namespace supervisor {
namespace {

constexpr uint32_t kLastFragment = 0x80000000u;
constexpr uint32_t kCall = 0;
constexpr uint32_t kReply = 1;
constexpr uint32_t kRpcVersion = 2;
constexpr uint32_t kMsgAccepted = 0;
constexpr uint32_t kAcceptSuccess = 0;
constexpr uint32_t kAuthNone = 0;
constexpr uint32_t kAuthSys = 1;
constexpr uint32_t kNullProcedure = 0;
constexpr uint32_t kCompoundProcedure = 1;
constexpr uint32_t kOpPutRootFh = 24;
constexpr uint32_t kOpLookup = 15;
constexpr uint32_t kNfs4ErrNoent = 2;
constexpr uint32_t kNfs4ErrDelay = 10008;
// A NULL reply is 24 bytes and our COMPOUND's a few dozen; anything much
// larger is not an answer to our call.
constexpr uint32_t kMaxReply = 1024;

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

void PutOpaque(std::vector<uint8_t>& out, const std::string& bytes) {
  PutU32(out, static_cast<uint32_t>(bytes.size()));
  out.insert(out.end(), bytes.begin(), bytes.end());
  while (out.size() % 4 != 0) out.push_back(0);
}

// The record-marked call: RPC header, then `credential` (flavor + body) and an
// AUTH_NONE verifier, then `args`.
std::vector<uint8_t> EncodeCall(uint32_t xid, uint32_t program, uint32_t version,
                                uint32_t procedure, const std::vector<uint8_t>& credential,
                                const std::vector<uint8_t>& args) {
  std::vector<uint8_t> body;
  PutU32(body, xid);
  PutU32(body, kCall);
  PutU32(body, kRpcVersion);
  PutU32(body, program);
  PutU32(body, version);
  PutU32(body, procedure);
  body.insert(body.end(), credential.begin(), credential.end());
  PutU32(body, kAuthNone);  // verifier: flavor, empty body
  PutU32(body, 0);
  body.insert(body.end(), args.begin(), args.end());
  std::vector<uint8_t> record;
  PutU32(record, kLastFragment | static_cast<uint32_t>(body.size()));
  record.insert(record.end(), body.begin(), body.end());
  return record;
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
  size_t pos() const { return pos_; }
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

// For socket() and connect(): out of descriptors or buffer memory here means
// the call was never made, so it says nothing about the server.
absl::Status ConnectErrno(const char* what) {
  const int err = errno;
  if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", std::strerror(err), " (in share-manager, not the server)"));
  }
  return Errno(what);
}

int RemainingMs(base::TimePoint deadline) {
  const auto left =
      std::chrono::duration_cast<base::Duration>(deadline - base::Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits for `events` on fd until the deadline.
absl::Status WaitFor(int fd, short events, base::TimePoint deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int timeout = RemainingMs(deadline);
    const int rc = poll(&p, 1, timeout);
    if (rc > 0) return absl::OkStatus();
    if (rc == 0) return absl::DeadlineExceededError(absl::StrCat("no answer while ", what));
    if (errno != EINTR) return Errno("poll");
  }
}

absl::Status ReadExactly(int fd, uint8_t* buf, size_t len, base::TimePoint deadline) {
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

absl::StatusOr<base::UniqueFd> Connect(const std::string& host, uint16_t port,
                                       base::TimePoint deadline) {
  const auto addr = base::IpSocketAddress(host, port);
  if (!addr.ok()) return addr.status();
  base::UniqueFd fd(socket(addr->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return ConnectErrno("socket");
  if (connect(fd.get(), addr->get(), addr->length) != 0) {
    if (errno != EINPROGRESS) return ConnectErrno("connect");
    if (auto s = WaitFor(fd.get(), POLLOUT, deadline, "connecting"); !s.ok()) return s;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      errno = err;
      return ConnectErrno("connect");
    }
  }
  return fd;
}

}  // namespace

std::vector<uint8_t> EncodeNullCall(uint32_t xid, uint32_t program, uint32_t version) {
  std::vector<uint8_t> none;
  PutU32(none, kAuthNone);
  PutU32(none, 0);
  return EncodeCall(xid, program, version, kNullProcedure, none, {});
}

std::vector<uint8_t> EncodeLookupCall(uint32_t xid, const std::string& component) {
  // authsys_parms: stamp, machine name, uid 0, gid 0, no extra groups.
  std::vector<uint8_t> parms;
  PutU32(parms, 0);
  PutOpaque(parms, "share-manager");
  PutU32(parms, 0);
  PutU32(parms, 0);
  PutU32(parms, 0);
  std::vector<uint8_t> sys;
  PutU32(sys, kAuthSys);
  PutU32(sys, static_cast<uint32_t>(parms.size()));
  sys.insert(sys.end(), parms.begin(), parms.end());
  std::vector<uint8_t> args;
  PutOpaque(args, "");  // tag
  PutU32(args, 0);      // minorversion
  PutU32(args, 2);      // two operations
  PutU32(args, kOpPutRootFh);
  PutU32(args, kOpLookup);
  PutOpaque(args, component);
  return EncodeCall(xid, kNfsProgram, kNfsVersion4, kCompoundProcedure, sys, args);
}

namespace {

// Checks the reply header for xid (accepted, SUCCESS); the reader is left at the results.
absl::Status ParseReplyHeader(XdrReader& r, uint32_t xid) {
  uint32_t got_xid = 0, type = 0, reply_stat = 0, verf_flavor = 0, verf_len = 0, accept = 0;
  if (!r.U32(got_xid) || !r.U32(type) || !r.U32(reply_stat)) {
    return absl::DataLossError("truncated RPC reply header");
  }
  if (got_xid != xid) return absl::DataLossError(absl::StrCat("reply xid ", got_xid, " != ", xid));
  if (type != kReply) {
    return absl::DataLossError(absl::StrCat("message type ", type, " is not a reply"));
  }
  if (reply_stat != kMsgAccepted) return absl::PermissionDeniedError("RPC call denied");
  if (!r.U32(verf_flavor) || !r.U32(verf_len) || !r.Skip(verf_len) || !r.U32(accept)) {
    return absl::DataLossError("truncated accepted reply");
  }
  if (accept != kAcceptSuccess) {
    return absl::UnavailableError(absl::StrCat("RPC not accepted: accept_stat ", accept));
  }
  return absl::OkStatus();
}

// Connects, sends one record-marked call and reads one reply record, all within the timeout.
absl::StatusOr<std::vector<uint8_t>> Exchange(const std::string& host, uint16_t port,
                                              const std::vector<uint8_t>& call,
                                              base::Duration timeout);

}  // namespace

absl::StatusOr<uint32_t> ParseRecordMark(std::span<const uint8_t, 4> mark) {
  const uint32_t header = (uint32_t{mark[0]} << 24) | (uint32_t{mark[1]} << 16) |
                          (uint32_t{mark[2]} << 8) | uint32_t{mark[3]};
  const uint32_t len = header & ~kLastFragment;
  if (len > kMaxReply) return absl::DataLossError(absl::StrCat("reply of ", len, " bytes"));
  return len;
}

absl::Status ParseNullReply(std::span<const uint8_t> record, uint32_t xid) {
  XdrReader r(record);
  return ParseReplyHeader(r, xid);
}

absl::StatusOr<uint32_t> ParseCompoundStatus(std::span<const uint8_t> record, uint32_t xid) {
  XdrReader r(record);
  if (auto s = ParseReplyHeader(r, xid); !s.ok()) return s;
  uint32_t status = 0;
  if (!r.U32(status)) return absl::DataLossError("truncated COMPOUND reply");
  return status;
}

namespace {

absl::StatusOr<std::vector<uint8_t>> Exchange(const std::string& host, uint16_t port,
                                              const std::vector<uint8_t>& call,
                                              base::Duration timeout) {
  const base::TimePoint deadline = base::Clock::now() + timeout;
  auto fd = Connect(host, port, deadline);
  if (!fd.ok()) return fd.status();
  size_t sent = 0;
  while (sent < call.size()) {
    if (auto s = WaitFor(fd->get(), POLLOUT, deadline, "sending the call"); !s.ok()) return s;
    const ssize_t n = send(fd->get(), call.data() + sent, call.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Errno("send");
    }
    sent += static_cast<size_t>(n);
  }
  uint8_t mark[4];
  if (auto s = ReadExactly(fd->get(), mark, sizeof(mark), deadline); !s.ok()) return s;
  auto len = ParseRecordMark(mark);
  if (!len.ok()) return len.status();
  std::vector<uint8_t> reply(*len);
  if (auto s = ReadExactly(fd->get(), reply.data(), *len, deadline); !s.ok()) return s;
  return reply;
}

uint32_t NextXid() {
  static std::atomic<uint32_t> next_xid{static_cast<uint32_t>(getpid()) << 16};
  return next_xid.fetch_add(1);
}

}  // namespace

absl::Status ProbeNfsNull(const std::string& host, uint16_t port, base::Duration timeout) {
  const uint32_t xid = NextXid();
  auto reply = Exchange(host, port, EncodeNullCall(xid), timeout);
  if (!reply.ok()) return reply.status();
  return ParseNullReply(*reply, xid);
}

absl::Status ProbeNfsExport(const std::string& host, uint16_t port, const std::string& component,
                            base::Duration timeout) {
  const uint32_t xid = NextXid();
  auto reply = Exchange(host, port, EncodeLookupCall(xid, component), timeout);
  if (!reply.ok()) return reply.status();
  auto status = ParseCompoundStatus(*reply, xid);
  if (!status.ok()) return status.status();
  if (*status == 0) return absl::OkStatus();
  if (*status == kNfs4ErrNoent) {
    return absl::NotFoundError(
        absl::StrCat("ganesha does not export /", component, " (see its log for why)"));
  }
  if (*status == kNfs4ErrDelay) {
    return absl::FailedPreconditionError(
        absl::StrCat("ganesha answers LOOKUP of /", component,
                     " with NFS4ERR_DELAY (busy, e.g. rereading its exports)"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("ganesha answers LOOKUP of /", component, " with nfsstat4 ", *status));
}

}  // namespace supervisor
