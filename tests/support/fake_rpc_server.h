// A one-connection ONC RPC server on 127.0.0.1 that answers an NFS probe's
// call as told, and the big-endian words such answers are made of.
#pragma once

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <thread>
#include <vector>

#include "base/unique_fd.h"

namespace testing_support {

inline std::vector<uint8_t> Words(std::initializer_list<uint32_t> words) {
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
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
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

}  // namespace testing_support
