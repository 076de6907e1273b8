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

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
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

// While gRPC holds descriptors of connections handed to it, the listener
// looks this often whether it has closed them (nothing wakes it when it
// does: for ended ones never, for open ones not where gRPC closes without a
// shutdown() first, see PinGrpcPollStrategy).
constexpr base::Duration kClosedCheckPeriod{50};

constexpr char kPollStrategyVariable[] = "GRPC_POLL_STRATEGY";
constexpr char kPinnedPollStrategy[] = "epoll1,poll";

}  // namespace

std::string PinGrpcPollStrategy() {
  if (const char* set = std::getenv(kPollStrategyVariable); set != nullptr && *set != '\0') {
    return set;
  }
  // gRPC takes the first of the list that works here: epoll1, or poll where
  // epoll is not to be had (rather than no gRPC at all).
  setenv(kPollStrategyVariable, kPinnedPollStrategy, /*overwrite=*/1);
  return kPinnedPollStrategy;
}

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
      eviction_log_(kLogPeriod),
      refusal_log_(kLogPeriod) {}

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
             .closing = closing_.size(),
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

void CappedListener::Refuse(const PeerAddress& peer, absl::FunctionRef<std::string()> why) {
  ++refused_;
  if (auto held_back = refusal_log_.Admit()) {
    spdlog::warn("health port: refused a connection from {}: {}{}", peer.ToString(), why(),
                 base::LogLimiter::HeldBack(*held_back));
  }
}

void CappedListener::Tally(const PeerAddress& peer, int open, int closing) {
  auto& held = held_[peer];
  held.open = static_cast<size_t>(static_cast<ptrdiff_t>(held.open) + open);
  held.closing = static_cast<size_t>(static_cast<ptrdiff_t>(held.closing) + closing);
  if (held.total() == 0) held_.erase(peer);
}

CappedListener::Held CappedListener::HeldBy(const PeerAddress& peer) const {
  const auto it = held_.find(peer);
  return it == held_.end() ? Held{} : it->second;
}

size_t CappedListener::MostHeld() const {
  size_t most = 0;
  for (const auto& [peer, held] : held_) most = std::max(most, held.total());
  return most;
}

void CappedListener::EndConnection(Connection connection) {
  Tally(connection.slot.peer, -1, +1);
  closing_.push_back(std::move(connection));
}

void CappedListener::ForgetClosed() {
  // gRPC has closed its descriptor when that number is closed or names
  // another file now: the duplicate keeps the socket, so no new socket can
  // have its inode meanwhile.
  auto closed = [](const Connection& connection) {
    struct stat st {};
    return fstat(connection.served_fd, &st) != 0 || st.st_dev != connection.device ||
           st.st_ino != connection.inode;
  };
  std::erase_if(closing_, [&](const Connection& connection) {
    if (!closed(connection)) return false;
    Tally(connection.slot.peer, 0, -1);
    return true;
  });
  // Closed without a shutdown() first (see PinGrpcPollStrategy): the
  // duplicate alone keeps the connection up; it ends here.
  std::erase_if(connections_, [&](const Connection& connection) {
    if (!closed(connection)) return false;
    shutdown(connection.watch.get(), SHUT_RDWR);
    Tally(connection.slot.peer, -1, 0);
    return true;
  });
}

void CappedListener::Run(grpc::Server* server) {
  std::vector<pollfd> fds;
  for (;;) {
    ForgetClosed();
    Publish();
    const auto now = base::Clock::now();
    const bool waiting = now < retry_at_;
    fds.clear();
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    // A negative descriptor is skipped by poll: nothing is accepted until the retry.
    fds.push_back({waiting ? -1 : listen_fd_.get(), POLLIN, 0});
    for (const auto& connection : connections_) {
      fds.push_back({connection.watch.get(), POLLRDHUP, 0});
    }
    std::optional<base::Duration> wake_in;
    if (waiting) wake_in = std::chrono::ceil<base::Duration>(retry_at_ - now);
    if (!closing_.empty() || !connections_.empty())
      wake_in = std::min(wake_in.value_or(kClosedCheckPeriod), kClosedCheckPeriod);
    const int timeout = wake_in ? static_cast<int>(wake_in->count()) : -1;
    if (poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno != EINTR) Shortage(absl::StrCat("poll: ", std::strerror(errno)));
      continue;
    }
    if (fds[0].revents != 0) return;  // Stop
    // Ended connections (the peer hung up, or gRPC shut the socket down):
    // counted as closing until gRPC has closed its descriptor.
    std::deque<Connection> open;
    for (size_t i = 0; i < connections_.size(); ++i) {
      if (fds[i + 2].revents == 0) {
        open.push_back(std::move(connections_[i]));
      } else {
        EndConnection(std::move(connections_[i]));
      }
    }
    connections_ = std::move(open);
    // What gRPC closed while the listener waited is forgotten before this
    // round's accepts are counted against the cap: a connection it closed
    // without a shutdown() (no POLLRDHUP on the duplicate) must not hold a
    // slot that an open one would be evicted for.
    ForgetClosed();
    if ((fds[1].revents & POLLIN) != 0) {
      closed_checked_ = false;
      // At most one round of the cap per poll: a flood that never lets
      // accept4 run dry must not keep Stop (and ended connections) unseen.
      for (size_t i = 0; i < options_.max_connections && AcceptOne(server); ++i) {
      }
    }
  }
}

bool CappedListener::MakeRoom(const PeerAddress& peer) {
  const size_t cap = options_.max_connections;
  const size_t ceiling = cap * CappedListenerOptions::kCeilingFactor;
  if (connections_.size() + closing_.size() >= ceiling && !closed_checked_) {
    ForgetClosed();  // what gRPC closed since this round began
    closed_checked_ = true;
  }
  const Held mine = HeldBy(peer);
  const size_t closing_share =
      std::max<size_t>(1, cap / CappedListenerOptions::kClosingShareDivisor);
  if (mine.closing >= closing_share) {
    Refuse(peer, [&] {
      return absl::StrCat(mine.closing, " of its connections ended but not yet closed by gRPC (",
                          closing_share, " at most)");
    });
    return false;
  }
  const size_t held = connections_.size() + closing_.size();
  const size_t hard_ceiling = cap * CappedListenerOptions::kHardCeilingFactor;
  if (held >= hard_ceiling || (held >= ceiling && mine.total() >= MostHeld())) {
    Refuse(peer, [&] {
      return absl::StrCat(connections_.size(), " connections open and ", closing_.size(),
                          " ended ones not yet closed by gRPC (the ceiling: ", ceiling,
                          held >= hard_ceiling ? absl::StrCat(", and for everyone: ", hard_ceiling)
                                               : absl::StrCat(", and its address holds ",
                                                              mine.total(), ", as many as any"),
                          ")");
    });
    return false;
  }
  if (connections_.size() < options_.max_connections) return true;
  slots_.clear();
  for (const auto& connection : connections_) slots_.push_back(connection.slot);
  const auto victim = SlotForNewcomer(
      slots_, [this](const PeerAddress& address) { return HeldBy(address).open; }, peer,
      clock_.Now(), options_.replace_after);
  if (!victim) {
    Refuse(peer, [&] {
      return absl::StrCat(cap, " connections open (the cap), ",
                          "its address holds as many as any and none of them has been open ",
                          base::FormatDuration(options_.replace_after));
    });
    return false;
  }
  // shutdown() reaches gRPC's descriptor of the same socket, and gRPC closes it.
  auto evicted = connections_.begin() + static_cast<std::ptrdiff_t>(*victim);
  shutdown(evicted->watch.get(), SHUT_RDWR);
  ++evicted_;
  if (auto held_back = eviction_log_.Admit()) {
    spdlog::warn(
        "health port: {} connections open (the cap); closed one from {} for a new one from {}{}",
        options_.max_connections, evicted->slot.peer.ToString(), peer.ToString(),
        base::LogLimiter::HeldBack(*held_back));
  }
  EndConnection(std::move(*evicted));
  connections_.erase(evicted);
  return true;
}

bool CappedListener::AcceptOne(grpc::Server* server) {
  sockaddr_storage address{};
  socklen_t address_len = sizeof(address);
  base::UniqueFd connection(accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&address),
                                    &address_len, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!connection) {
    if (errno == EINTR || errno == ECONNABORTED) return true;  // the next one, if any
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    // EMFILE, ENFILE, ENOBUFS, ENOMEM or worse: the port is never given up.
    Shortage(absl::StrCat("accept4: ", std::strerror(errno)));
    return false;
  }
  const auto peer = PeerAddress::From(address);
  // The duplicate first: a newcomer that cannot be watched (out of
  // descriptors) must not have cost an open connection its slot.
  Connection served{.slot = {.peer = peer, .accepted = clock_.Now()},
                    .watch = base::UniqueFd(fcntl(connection.get(), F_DUPFD_CLOEXEC, 0))};
  struct stat st {};
  if (!served.watch || fstat(served.watch.get(), &st) != 0) {
    Shortage(absl::StrCat("dup: ", std::strerror(errno)));
    return false;  // the new connection is closed: its client tries again
  }
  served.device = st.st_dev;
  served.inode = st.st_ino;
  if (!MakeRoom(peer)) return true;  // `connection` and its duplicate close here
  const int one = 1;
  setsockopt(connection.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  served.served_fd = connection.release();
  grpc::AddInsecureChannelFromFd(server, served.served_fd);
  Tally(peer, +1, 0);
  connections_.push_back(std::move(served));
  return true;
}

}  // namespace sharemgr
