#include "sharemgr/capped_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/server_posix.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/fmt_absl.h"

namespace sharemgr {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// A socket listening on HOST:PORT. A wildcard host is every address, IPv6 and
// IPv4 alike where the host has IPv6 (what gRPC's own listener does).
absl::StatusOr<base::UniqueFd> ListenOn(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(host_port.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", host_port, "' is not HOST:PORT"));
  }
  std::string host = host_port.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") host = "127.0.0.1";
  const bool wildcard = host.empty() || host == "0.0.0.0" || host == "::";
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (wildcard || inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v6);
  } else if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("'", host, "' is not an IP address"));
  }
  const int flags = SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC;
  base::UniqueFd fd(socket(addr.ss_family, flags, 0));
  if (!fd && wildcard && errno == EAFNOSUPPORT) {  // no IPv6 here: IPv4's wildcard
    addr = {};
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(*v4);
    fd.reset(socket(AF_INET, flags, 0));
  }
  if (!fd) return Errno("socket");
  const int zero = 0;
  const int one = 1;
  if (addr.ss_family == AF_INET6 && wildcard) {
    setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  }
  // As gRPC's listener: a restart binds at once despite the last run's
  // TIME_WAIT connections; no SO_REUSEPORT, so a second process cannot.
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Errno(absl::StrCat("bind ", host_port));
  }
  if (listen(fd.get(), SOMAXCONN) != 0) return Errno(absl::StrCat("listen ", host_port));
  return fd;
}

uint16_t BoundPort(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

constexpr base::Duration kLogPeriod{30'000};

// At most max_connections evictions within this.
constexpr base::Duration kEvictionWindow{1000};

}  // namespace

absl::StatusOr<std::unique_ptr<CappedListener>> CappedListener::Bind(
    const std::string& host_port, CappedListenerOptions options) {
  auto fd = ListenOn(host_port);
  if (!fd.ok()) return fd.status();
  base::UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) return Errno("eventfd");
  const uint16_t port = BoundPort(fd->get());
  return std::unique_ptr<CappedListener>(
      new CappedListener(std::move(*fd), std::move(wake), port, options));
}

CappedListener::CappedListener(base::UniqueFd listen_fd, base::UniqueFd wake_fd, uint16_t port,
                               CappedListenerOptions options)
    : listen_fd_(std::move(listen_fd)),
      wake_fd_(std::move(wake_fd)),
      port_(port),
      options_(options),
      clock_(options.clock ? *options.clock : base::SteadyClock()),
      shortage_log_(kLogPeriod),
      eviction_log_(kLogPeriod) {}

CappedListener::~CappedListener() { Stop(); }

void CappedListener::Start(grpc::Server* server) {
  thread_ = std::thread([this, server] { Run(server); });
}

void CappedListener::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  (void)write(wake_fd_.get(), &one, sizeof(one));
  thread_.join();
  listen_fd_.reset();
}

CappedListener::Counts CappedListener::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

void CappedListener::Publish() {
  absl::MutexLock lock(&mu_);
  counts_ = {.open = connections_.size(),
             .evicted = evicted_,
             .refused = refused_,
             .shortages = shortages_};
}

void CappedListener::Shortage(const std::string& what) {
  ++shortages_;
  retry_at_ = base::Clock::now() + options_.shortage_retry;
  if (auto held_back = shortage_log_.Admit()) {
    spdlog::warn("health port: cannot accept a connection ({}); trying again in {}{}", what,
                 base::FormatDuration(options_.shortage_retry),
                 base::LogLimiter::HeldBack(*held_back));
  }
}

void CappedListener::Run(grpc::Server* server) {
  std::vector<pollfd> fds;
  for (;;) {
    const auto now = base::Clock::now();
    const bool waiting = now < retry_at_;
    fds.clear();
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    // A negative descriptor is skipped by poll: nothing is accepted until the retry.
    fds.push_back({waiting ? -1 : listen_fd_.get(), POLLIN, 0});
    for (const auto& connection : connections_) fds.push_back({connection.get(), POLLRDHUP, 0});
    const int timeout =
        waiting ? static_cast<int>(std::chrono::ceil<base::Duration>(retry_at_ - now).count()) : -1;
    if (poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno != EINTR) Shortage(absl::StrCat("poll: ", std::strerror(errno)));
      continue;
    }
    if (fds[0].revents != 0) return;  // Stop
    // Ended connections (the peer hung up, or gRPC shut the socket down):
    // their duplicates go.
    std::deque<base::UniqueFd> open;
    for (size_t i = 0; i < connections_.size(); ++i) {
      if (fds[i + 2].revents == 0) open.push_back(std::move(connections_[i]));
    }
    connections_ = std::move(open);
    if ((fds[1].revents & POLLIN) != 0) {
      // At most one round of the cap per poll: a flood that never lets
      // accept4 run dry must not keep Stop (and ended connections) unseen.
      for (size_t i = 0; i < options_.max_connections && AcceptOne(server); ++i) {
      }
    }
    Publish();
  }
}

bool CappedListener::AcceptOne(grpc::Server* server) {
  base::UniqueFd connection(
      accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!connection) {
    if (errno == EINTR || errno == ECONNABORTED) return true;  // the next one, if any
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    // EMFILE, ENFILE, ENOBUFS, ENOMEM or worse: the port is never given up.
    Shortage(absl::StrCat("accept4: ", std::strerror(errno)));
    return false;
  }
  if (connections_.size() >= options_.max_connections) {
    const auto now = clock_.Now();
    if (now - eviction_window_ >= kEvictionWindow) {
      eviction_window_ = now;
      window_evictions_ = 0;
    }
    if (window_evictions_ >= options_.max_connections) {
      ++refused_;
      if (auto held_back = eviction_log_.Admit()) {
        spdlog::warn(
            "health port: {} connections open and as many closed within a second; "
            "refusing new ones{}",
            options_.max_connections, base::LogLimiter::HeldBack(*held_back));
      }
      return true;  // `connection` closes here
    }
    // The oldest makes room: shutdown() reaches gRPC's descriptor of the same
    // socket, and gRPC closes it.
    shutdown(connections_.front().get(), SHUT_RDWR);
    connections_.pop_front();
    ++evicted_;
    ++window_evictions_;
    if (auto held_back = eviction_log_.Admit()) {
      spdlog::warn("health port: {} connections open (the cap); closed the oldest for a new one{}",
                   options_.max_connections, base::LogLimiter::HeldBack(*held_back));
    }
  }
  base::UniqueFd watch(fcntl(connection.get(), F_DUPFD_CLOEXEC, 0));
  if (!watch) {
    Shortage(absl::StrCat("dup: ", std::strerror(errno)));
    return false;  // the new connection is closed: its client tries again
  }
  const int one = 1;
  setsockopt(connection.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  grpc::AddInsecureChannelFromFd(server, connection.release());
  connections_.push_back(std::move(watch));
  return true;
}

}  // namespace sharemgr
