#include "tests/support/http_get.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/socket_address.h"
#include "base/unique_fd.h"

namespace testing_support {
namespace {

using Clock = std::chrono::steady_clock;

// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status Await(int fd, short events, Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  pollfd p{.fd = fd, .events = events, .revents = 0};
  const int n = poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
  if (n < 0) return absl::InternalError(absl::StrCat("poll: ", std::strerror(errno)));
  if (n == 0) return absl::DeadlineExceededError("no answer in time");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HttpResponse> HttpRequest(const std::string& host, uint16_t port,
                                         const std::string& method, const std::string& path,
                                         std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const auto addr = base::IpSocketAddress(host, port);
  if (!addr.ok()) return addr.status();
  base::UniqueFd fd(socket(addr->family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  if (connect(fd.get(), addr->get(), addr->length) != 0 && errno != EINPROGRESS) {
    return absl::UnavailableError(absl::StrCat("connect: ", std::strerror(errno)));
  }
  if (auto s = Await(fd.get(), POLLOUT, deadline); !s.ok()) return s;
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return absl::UnavailableError(absl::StrCat("connect: ", std::strerror(err)));

  const std::string request =
      absl::StrCat(method, " ", path, " HTTP/1.0\r\nHost: ", host, ":", port, "\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    if (auto s = Await(fd.get(), POLLOUT, deadline); !s.ok()) return s;
    const ssize_t n = send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN) {
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    }
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[16384];
  for (;;) {
    if (auto s = Await(fd.get(), POLLIN, deadline); !s.ok()) return s;
    const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN) continue;
      return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    }
    raw.append(buf, static_cast<size_t>(n));
  }
  // "HTTP/1.1 200 OK\r\nheaders...\r\n\r\nbody"
  const size_t end = raw.find("\r\n\r\n");
  const size_t space = raw.find(' ');
  HttpResponse response;
  if (end == std::string::npos || space == std::string::npos ||
      !absl::SimpleAtoi(raw.substr(space + 1, 3), &response.status)) {
    return absl::DataLossError(absl::StrCat("not an HTTP answer: ", raw.substr(0, 200)));
  }
  response.headers = raw.substr(0, end);
  response.body = raw.substr(end + 4);
  return response;
}

}  // namespace testing_support
