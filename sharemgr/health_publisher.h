// Maps the share's state onto grpc.health.v1: readiness ("" and "readiness")
// and liveness ("liveness", fed by a watchdog on the supervisor loop).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

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
  // liveness NOT_SERVING.
  HealthPublisher(grpc::HealthCheckServiceInterface& health,
                  std::function<base::TimePoint()> last_tick, base::Duration stall_limit);
  ~HealthPublisher();
  HealthPublisher(const HealthPublisher&) = delete;
  HealthPublisher& operator=(const HealthPublisher&) = delete;

  // Any thread; called on every state change.
  void OnState(supervisor::State state);

 private:
  void Apply();
  void Watchdog();

  grpc::HealthCheckServiceInterface& health_;
  std::function<base::TimePoint()> last_tick_;
  base::Duration stall_limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;
  supervisor::State state_ = supervisor::State::kStarting;
  bool stalled_ = false;
  std::optional<bool> published_ready_;  // what Watch streams last got
  std::optional<bool> published_live_;
  std::thread watchdog_;
};

}  // namespace sharemgr
