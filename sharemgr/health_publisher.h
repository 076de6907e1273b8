// Maps the share's state onto grpc.health.v1: readiness ("" and "readiness")
// and liveness ("liveness", fed by a watchdog on the supervisor loop), on every
// server that answers health checks (the API port and the plaintext health port).
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "supervisor/health_state.h"

namespace grpc {
class HealthCheckServiceInterface;
}

namespace sharemgr {

class HealthPublisher {
 public:
  // `last_tick` reports when the supervisor loop last woke (TimePoint{} before
  // it first runs); a running loop silent for longer than `stall_limit` makes
  // liveness NOT_SERVING. Every service in `health` gets the same answers.
  HealthPublisher(std::vector<grpc::HealthCheckServiceInterface*> health,
                  std::function<base::TimePoint()> last_tick, base::Duration stall_limit);
  ~HealthPublisher();
  HealthPublisher(const HealthPublisher&) = delete;
  HealthPublisher& operator=(const HealthPublisher&) = delete;

  // Any thread; called on every state change.
  void OnState(supervisor::State state) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Apply() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Watchdog() ABSL_LOCKS_EXCLUDED(mu_);

  const std::vector<grpc::HealthCheckServiceInterface*> health_;
  std::function<base::TimePoint()> last_tick_;
  base::Duration stall_limit_;
  absl::Mutex mu_;
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  supervisor::State state_ ABSL_GUARDED_BY(mu_) = supervisor::State::kStarting;
  bool stalled_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<bool> published_ready_ ABSL_GUARDED_BY(mu_);  // what Watch streams last got
  std::optional<bool> published_live_ ABSL_GUARDED_BY(mu_);
  std::thread watchdog_;
};

}  // namespace sharemgr
