// The plaintext health port's own accept loop, for what gRPC 1.51's listener
// lacks:
// - it survives a shortage of descriptors: gRPC's stops accepting for good
//   after one accept4() fails with EMFILE (the port stays deaf until a
//   restart, and kubelet's liveness probe fails); this one waits a moment and
//   accepts again;
// - a cap on connections: at the cap the oldest connection is closed to make
//   room, so a flood can neither use up the process's descriptors nor lock
//   out kubelet's next probe (the newest connection gets in). gRPC closes an
//   evicted connection's descriptor a moment later, not at once, so at most
//   the cap's worth are evicted per second; beyond that a new connection is
//   closed at once instead, and the descriptors in use stay bounded.
// Each accepted connection is handed to the gRPC server
// (AddInsecureChannelFromFd: plaintext only, which the health port is), which
// owns that descriptor from then on. The listener keeps a duplicate of it to
// learn when the connection ends (the peer's hang-up, or gRPC's own
// shutdown() before it closes a connection), and to end the oldest one.
#pragma once

#include <grpcpp/server.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "base/log_limiter.h"
#include "base/unique_fd.h"

namespace sharemgr {

struct CappedListenerOptions {
  size_t max_connections = 64;
  // After accept4() ran short of descriptors or memory, it is tried again this much later.
  base::Duration shortage_retry{100};
  // What counts evictions per second (the steady clock unless a test drives one).
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
    uint64_t evicted = 0;    // oldest connections closed at the cap
    uint64_t refused = 0;    // new connections closed at once (evictions spent)
    uint64_t shortages = 0;  // accept4() calls that ran out of descriptors or memory
  };
  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  CappedListener(base::UniqueFd listen_fd, base::UniqueFd wake_fd, uint16_t port,
                 CappedListenerOptions options);
  void Run(grpc::Server* server);
  // Listener thread: one connection off the queue (false: none there, or a shortage).
  bool AcceptOne(grpc::Server* server);
  void Shortage(const std::string& what);
  void Publish() ABSL_LOCKS_EXCLUDED(mu_);

  base::UniqueFd listen_fd_;      // closed by Stop: new connections are refused
  const base::UniqueFd wake_fd_;  // eventfd: Stop wakes the thread through it
  const uint16_t port_;
  const CappedListenerOptions options_;
  const base::TimeSource& clock_;
  std::thread thread_;
  // Listener thread only: a duplicate of every open connection, oldest first.
  std::deque<base::UniqueFd> connections_;
  base::TimePoint retry_at_{};  // a shortage: accept nothing before then
  base::LogLimiter shortage_log_;
  base::LogLimiter eviction_log_;
  uint64_t evicted_ = 0;
  uint64_t refused_ = 0;
  uint64_t shortages_ = 0;
  // Evictions in the second that began at eviction_window_.
  base::TimePoint eviction_window_{};
  size_t window_evictions_ = 0;
  mutable absl::Mutex mu_;
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sharemgr
