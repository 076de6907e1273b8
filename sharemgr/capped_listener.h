// The plaintext health port's own accept loop, for what gRPC 1.51's listener
// lacks:
// - it survives a shortage of descriptors: gRPC's stops accepting for good
//   after one accept4() fails with EMFILE (the port stays deaf until a
//   restart, and kubelet's liveness probe fails); this one waits a moment and
//   accepts again;
// - a cap on connections, counted per peer address: at the cap a connection
//   is closed to make room, chosen so that a flood from one address cannot
//   lock out another (capped_listener_slots.h says which); the newcomer is
//   refused (closed at once) only when its own address already holds as many
//   as any and none of them has been open a second;
// - ceilings on descriptors: a connection ended (by its peer, by gRPC, or
//   closed here to make room) still holds gRPC's descriptor until gRPC gets
//   round to closing it. Those are counted too, per address, until their
//   descriptor is seen closed. An address holding half the cap's worth of
//   them gets no new connection (a connect-and-reset loop faster than gRPC's
//   teardown is held to that). Past twice the cap of open and closing
//   connections together, only a newcomer whose address holds fewer (open
//   and closing) than the address holding the most gets in, and past three
//   times the cap nobody: several addresses churning together cannot shut
//   out one that is not, and the descriptors stay bounded.
// Each accepted connection is handed to the gRPC server
// (AddInsecureChannelFromFd: plaintext only, which the health port is), which
// owns that descriptor from then on. The listener keeps a duplicate of it to
// learn when the connection ends (the peer's hang-up, or gRPC's own
// shutdown() before it closes a connection), to end it (shutdown() reaches
// gRPC's descriptor of the same socket), and to tell when gRPC has closed its
// own: gRPC 1.51 says nothing when it does, so the listener looks at the
// descriptor number it handed over (fstat): once that number is closed or
// names another file than the duplicate's socket (the duplicate keeps the
// socket, so its inode cannot be reused meanwhile), gRPC is done with it.
#pragma once

#include <grpcpp/server.h>
#include <sys/stat.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "base/log_limiter.h"
#include "base/unique_fd.h"
#include "sharemgr/capped_listener_slots.h"

namespace sharemgr {

// The listener hears a connection end from gRPC's shutdown() of its socket
// before gRPC closes the descriptor (its duplicate keeps the socket open
// otherwise, and the peer would see no end). gRPC 1.51's pollers epoll1 and
// poll both shut a connection down before closing it; should gRPC ever close
// one without, the listener notices at its next look (fstat, above: it looks
// every 50 ms while it has connections, and before each round of accepts),
// and the cap bounds what is held meanwhile. This sets GRPC_POLL_STRATEGY to
// "epoll1,poll": gRPC takes the first that works here, epoll1 (its first
// choice on Linux already, pinned so that neither a later default nor an
// inherited environment changes it unseen), or poll where epoll cannot be
// had, rather than failing to start. A GRPC_POLL_STRATEGY the user set is
// kept (their choice). gRPC reads the variable once, when it starts: call
// first thing in main, before any thread or gRPC object exists. Returns the
// value in force.
std::string PinGrpcPollStrategy();

struct CappedListenerOptions {
  size_t max_connections = 64;
  // Open and closing connections together beyond this times max_connections:
  // only an address holding fewer than another gets in.
  static constexpr size_t kCeilingFactor = 2;
  // ... and beyond this times max_connections, nobody.
  static constexpr size_t kHardCeilingFactor = 3;
  // An address with this fraction of max_connections (at least one) ended but
  // not yet closed by gRPC gets no new connection.
  static constexpr size_t kClosingShareDivisor = 2;
  // A connection gives up its slot to a newcomer from its own address (or
  // from one as big) only once it has been open this long: a flood from one
  // address turns its slots over at most once per this each, and a probe
  // from that address has this long to be answered.
  base::Duration replace_after{1000};
  // After accept4() ran short of descriptors or memory, it is tried again this much later.
  base::Duration shortage_retry{100};
  // What dates connections (the steady clock unless a test drives one).
  const base::TimeSource* clock = nullptr;
};

class CappedListener {
 public:
  // Binds and listens on HOST:PORT as --health-listen takes it (an IP literal,
  // [v6], empty or 0.0.0.0 or :: for every address, localhost for 127.0.0.1;
  // port 0 picks one). Nothing is accepted before Start.
  static absl::StatusOr<std::unique_ptr<CappedListener>> Bind(const std::string& host_port,
                                                              CappedListenerOptions options);
  ~CappedListener();
  CappedListener(const CappedListener&) = delete;
  CappedListener& operator=(const CappedListener&) = delete;

  uint16_t port() const { return port_; }

  // Accepts on a thread of its own, handing connections to `server` (started,
  // and not shut down before Stop returns). Once only.
  void Start(grpc::Server* server);
  // Stops accepting and joins the thread; open connections stay the server's.
  // Idempotent; any thread but the listener's.
  void Stop();

  struct Counts {
    size_t open = 0;         // connections handed to the server and not ended yet
    size_t closing = 0;      // ended, but gRPC's descriptor not seen closed yet
    uint64_t evicted = 0;    // connections closed at the cap to make room
    uint64_t refused = 0;    // new connections closed at once
    uint64_t shortages = 0;  // accept4() calls that ran out of descriptors or memory
  };
  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // A connection handed to the server.
  struct Connection {
    OpenConnection slot;
    base::UniqueFd watch;  // the listener's duplicate
    int served_fd = -1;    // the descriptor the server owns (a number only)
    dev_t device = 0;      // the socket's identity, as fstat tells it
    ino_t inode = 0;
  };

  // How many connections one address holds.
  struct Held {
    size_t open = 0;
    size_t closing = 0;
    size_t total() const { return open + closing; }
  };

  CappedListener(base::UniqueFd listen_fd, base::UniqueFd wake_fd, uint16_t port,
                 CappedListenerOptions options);
  void Run(grpc::Server* server);
  // Listener thread: one connection off the queue (false: none there, or a shortage).
  bool AcceptOne(grpc::Server* server);
  // Listener thread: whether a new connection from `peer` may have a slot,
  // making room at the cap (false: it is refused).
  bool MakeRoom(const PeerAddress& peer);
  // Listener thread: forgets the connections gRPC has closed.
  void ForgetClosed();
  // Listener thread: an open connection ends; it counts as closing.
  void EndConnection(Connection connection);
  // Listener thread: adds to (or takes from) what `peer` holds.
  void Tally(const PeerAddress& peer, int open, int closing);
  Held HeldBy(const PeerAddress& peer) const;
  // Listener thread: the most connections (open and closing) any address holds.
  size_t MostHeld() const;
  // `why` is only worked out when the refusal is logged.
  void Refuse(const PeerAddress& peer, absl::FunctionRef<std::string()> why);
  void Shortage(const std::string& what);
  void Publish() ABSL_LOCKS_EXCLUDED(mu_);

  base::UniqueFd listen_fd_;      // closed by Stop: new connections are refused
  const base::UniqueFd wake_fd_;  // eventfd: Stop wakes the thread through it
  const uint16_t port_;
  const CappedListenerOptions options_;
  const base::TimeSource& clock_;
  std::thread thread_;
  // Listener thread only: the open connections, oldest first, and the ended ones
  // whose descriptor gRPC still holds.
  std::deque<Connection> connections_;
  std::vector<Connection> closing_;
  // What each address holds of those two; addresses holding none are left out.
  std::map<PeerAddress, Held> held_;
  // ForgetClosed has run since this round of accepts began (once is enough:
  // each run looks at every descriptor).
  bool closed_checked_ = false;
  std::vector<OpenConnection> slots_;  // MakeRoom's scratch, kept to spare an allocation
  base::TimePoint retry_at_{};         // a shortage: accept nothing before then
  base::LogLimiter shortage_log_;
  base::LogLimiter eviction_log_;
  base::LogLimiter refusal_log_;
  uint64_t evicted_ = 0;
  uint64_t refused_ = 0;
  uint64_t shortages_ = 0;
  mutable absl::Mutex mu_;
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sharemgr
