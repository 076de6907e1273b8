#include "sharemgr/health_publisher.h"

#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "base/fmt_absl.h"
#include "sharemgr/health_names.h"

namespace sharemgr {

using supervisor::State;

HealthPublisher::HealthPublisher(std::vector<grpc::HealthCheckServiceInterface*> health,
                                 std::function<base::TimePoint()> last_tick,
                                 base::Duration stall_limit)
    : health_(std::move(health)), last_tick_(std::move(last_tick)), stall_limit_(stall_limit) {
  Apply();
  watchdog_ = std::thread([this] { Watchdog(); });
}

HealthPublisher::~HealthPublisher() {
  {
    absl::MutexLock lock(&mu_);
    quit_ = true;
  }
  watchdog_.join();
}

void HealthPublisher::OnState(State state) {
  absl::MutexLock lock(&mu_);
  state_ = state;
  Apply();
}

// Callers hold mu_ (or run before the watchdog starts).
void HealthPublisher::Apply() {
  const bool ready = state_ == State::kServing;
  // STOPPING is not a liveness failure: a restart would not help a clean stop.
  const bool live = state_ != State::kFailed && !stalled_;
  // gRPC pushes every SetServingStatus to Watch streams, changed or not; a
  // watcher should see changes only (STARTING -> DEGRADED is NOT_SERVING twice).
  if (ready != published_ready_) {
    for (auto* health : health_) {
      health->SetServingStatus("", ready);
      health->SetServingStatus(kReadinessService, ready);
    }
    published_ready_ = ready;
  }
  if (live != published_live_) {
    for (auto* health : health_) health->SetServingStatus(kLivenessService, live);
    published_live_ = live;
  }
}

void HealthPublisher::Watchdog() {
  const auto period = stall_limit_ / 4;
  absl::MutexLock lock(&mu_);
  auto quit = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return quit_; };
  while (!mu_.AwaitWithTimeout(absl::Condition(&quit), absl::FromChrono(period))) {
    // Before the loop runs, the daemon is checking and mounting the volume
    // (e2fsck may take minutes); that phase is bounded by the startup probe,
    // and a liveness failure would only restart the check.
    const auto last_tick = last_tick_();
    if (last_tick == base::TimePoint{}) continue;
    const auto silent = base::Clock::now() - last_tick;
    const bool stalled = silent > stall_limit_;
    if (stalled == stalled_) continue;
    stalled_ = stalled;
    if (stalled) {
      spdlog::error("supervisor loop silent for {}; liveness NOT_SERVING",
                    base::FormatDuration(std::chrono::duration_cast<base::Duration>(silent)));
    } else {
      spdlog::info("supervisor loop ticking again; liveness restored");
    }
    Apply();
  }
}

}  // namespace sharemgr
