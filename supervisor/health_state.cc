#include "supervisor/health_state.h"

#include <spdlog/spdlog.h>

#include "base/json_log.h"

namespace supervisor {

std::string_view StateName(State state) {
  switch (state) {
    case State::kStarting:
      return "STARTING";
    case State::kServing:
      return "SERVING";
    case State::kDegraded:
      return "DEGRADED";
    case State::kFailed:
      return "FAILED";
    case State::kStopping:
      return "STOPPING";
  }
  return "UNKNOWN";
}

bool HealthStateMachine::Allowed(State from, State to) {
  if (from == to) return false;
  switch (from) {
    case State::kStarting:
    case State::kServing:
    case State::kDegraded:
      return to != State::kStarting;
    case State::kFailed:
      // A signal during the failed linger still stops the daemon.
      return to == State::kStopping;
    case State::kStopping:
      return false;
  }
  return false;
}

bool HealthStateMachine::TransitionTo(State to, std::string reason) {
  if (!Allowed(state_, to)) return false;
  Transition transition{state_, to, std::move(reason)};
  const base::LogFields fields({{"state", std::string(StateName(to))},
                                {"previous_state", std::string(StateName(transition.from))}});
  spdlog::info("state {} -> {}: {}", StateName(transition.from), StateName(transition.to),
               transition.reason);
  state_ = to;
  reason_ = transition.reason;
  for (const auto& observer : observers_) observer(transition);
  return true;
}

}  // namespace supervisor
