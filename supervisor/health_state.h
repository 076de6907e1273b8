// The share's health state machine. Every transition is validated, logged
// with its reason and handed to observers (status board, gRPC health, ...).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"

namespace supervisor {

enum class State { kStarting, kServing, kDegraded, kFailed, kStopping };

std::string_view StateName(State state);

struct Transition {
  State from;
  State to;
  std::string reason;
};

class HealthStateMachine {
 public:
  using Observer = std::function<void(const Transition&)>;

  State state() const { return state_; }
  const std::string& reason() const { return reason_; }

  // Observers run synchronously on the caller's thread, in registration order.
  void AddObserver(Observer observer) { observers_.push_back(std::move(observer)); }

  // Moves to `to`. Returns false, changing nothing, when `to` is the current
  // state or the move is not allowed (FAILED and STOPPING are terminal).
  bool TransitionTo(State to, std::string reason);

  static bool Allowed(State from, State to);

 private:
  State state_ = State::kStarting;
  std::string reason_ = "starting ganesha";
  std::vector<Observer> observers_;
};

}  // namespace supervisor
