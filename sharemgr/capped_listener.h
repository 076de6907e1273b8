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
// - a hard ceiling on descriptors: a connection ended (by its peer, by gRPC,
//   or closed here to make room) still holds gRPC's descriptor until gRPC
//   gets round to closing it. Those are counted too, until their descriptor
//   is seen closed, and past twice the cap of open and closing connections
//   together every newcomer is refused.
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
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "base/log_limiter.h"
#include "base/unique_fd.h"
#include "sharemgr/capped_listener_slots.h"

namespace sharemgr {

// gRPC's poller "epoll1" shuts a connection's socket down before it closes
// the descriptor; its "poll" poller closes without. The listener hears a
// connection end from that shutdown (its duplicate keeps the socket open
// otherwise, and the peer would see no end); without it, it only notices at
// its next wake-up (fstat, above), and the cap still bounds what is held
// meanwhile. epoll1 is gRPC 1.51's first choice on Linux already: this pins
// it, so neither a later default nor an inherited environment changes it
// unseen. A GRPC_POLL_STRATEGY the user set is kept (their choice, at that
// cost). gRPC reads the variable once, when it starts: call first thing in
// main, before any thread or gRPC object exists. Returns the value in force.
std::string PinGrpcPollStrategy();

struct CappedListenerOptions {
  size_t max_connections = 64;
  // Open and closing connections together are refused beyond this times max_connections.
  static constexpr size_t kCeilingFactor = 2;
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
  void Refuse(const PeerAddress& peer, const std::string& why);
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
  base::TimePoint retry_at_{};  // a shortage: accept nothing before then
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
