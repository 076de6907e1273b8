#include "base/listen.h"

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "base/loopback_port.h"

namespace base {
namespace {

// The port a listening socket got.
uint16_t PortOf(const UniqueFd& fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  REQUIRE(getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

// A process that holds `fd` (this one's copy is closed) until it is killed.
class Holder {
 public:
  explicit Holder(UniqueFd fd) {
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      for (;;) pause();
    }
    fd.reset();
  }
  ~Holder() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

TEST_CASE("ListenTcp: a taken port says bind HOST:PORT and the errno, a free one listens") {
  auto first = ListenTcp("127.0.0.1:0");
  REQUIRE(first.ok());
  const std::string address = "127.0.0.1:" + std::to_string(PortOf(*first));
  const auto taken = CheckCanListenTcp(address);
  CHECK(taken.code() == absl::StatusCode::kUnavailable);
  CHECK(taken.message() == "bind " + address + ": Address already in use");
  first->reset();
  CHECK(CheckCanListenTcp(address).ok());
  CHECK(CheckCanListenTcp("[::1]:0").ok());
  CHECK(CheckCanListenTcp("localhost:0").ok());
  CHECK(ListenTcp("127.0.0.1:99999").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ListenTcp("nohost:1").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("JoinHostPort brackets IPv6 literals only") {
  CHECK(JoinHostPort("127.0.0.1", 2049) == "127.0.0.1:2049");
  CHECK(JoinHostPort("::1", 2049) == "[::1]:2049");
}

TEST_CASE("CheckListenerOwner: only the process holding the listening socket owns the port") {
  auto listener = ListenTcp("127.0.0.1:0");
  REQUIRE(listener.ok());
  const uint16_t port = PortOf(*listener);
  CHECK(CheckListenerOwner(getpid(), "127.0.0.1", port).ok());

  // Another process's listener: connections to the port reach it, not this one.
  const Holder other(std::move(*listener));
  const auto not_ours = CheckListenerOwner(getpid(), "127.0.0.1", port);
  CHECK(not_ours.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(not_ours.message().find("belongs to another process, not to pid") !=
        absl::string_view::npos);
  CHECK(CheckListenerOwner(other.pid(), "127.0.0.1", port).ok());
}

TEST_CASE("CheckListenerOwner: a wildcard listener counts for every address, none is no owner") {
  auto wildcard = ListenTcp(":0");
  REQUIRE(wildcard.ok());
  const uint16_t port = PortOf(*wildcard);
  CHECK(CheckListenerOwner(getpid(), "127.0.0.1", port).ok());
  CHECK(CheckListenerOwner(getpid(), "::1", port).ok());
  const Holder other(std::move(*wildcard));
  CHECK(CheckListenerOwner(getpid(), "127.0.0.1", port).code() ==
        absl::StatusCode::kFailedPrecondition);

  const uint16_t closed = FreeLoopbackPort();
  const auto none = CheckListenerOwner(getpid(), "127.0.0.1", closed);
  CHECK(none.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(none.message().find("no socket") != absl::string_view::npos);
  CHECK(CheckListenerOwner(getpid(), "not-an-ip", closed).code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace base
