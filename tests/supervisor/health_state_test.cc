#include "supervisor/health_state.h"

#include <doctest/doctest.h>

#include <vector>

namespace supervisor {

TEST_CASE("transitions reach observers in order with their reasons") {
  HealthStateMachine machine;
  std::vector<std::string> seen;
  machine.AddObserver([&](const Transition& t) {
    seen.push_back(std::string(StateName(t.from)) + "->" + std::string(StateName(t.to)) + ":" +
                   t.reason);
  });
  CHECK(machine.state() == State::kStarting);
  CHECK(machine.TransitionTo(State::kServing, "up"));
  CHECK(machine.TransitionTo(State::kDegraded, "crash"));
  CHECK(machine.TransitionTo(State::kServing, "back"));
  CHECK(machine.TransitionTo(State::kStopping, "SIGTERM"));
  CHECK(seen == std::vector<std::string>{"STARTING->SERVING:up", "SERVING->DEGRADED:crash",
                                         "DEGRADED->SERVING:back", "SERVING->STOPPING:SIGTERM"});
  CHECK(machine.reason() == "SIGTERM");
}

TEST_CASE("a repeated state is not a transition and notifies nobody") {
  HealthStateMachine machine;
  int calls = 0;
  machine.AddObserver([&](const Transition&) { ++calls; });
  CHECK(machine.TransitionTo(State::kServing, "up"));
  CHECK_FALSE(machine.TransitionTo(State::kServing, "still up"));
  CHECK(calls == 1);
  CHECK(machine.reason() == "up");
}

TEST_CASE("FAILED and STOPPING are terminal, nothing returns to STARTING") {
  for (State s :
       {State::kStarting, State::kServing, State::kDegraded, State::kFailed, State::kStopping}) {
    CAPTURE(StateName(s));
    CHECK_FALSE(HealthStateMachine::Allowed(s, State::kStarting));
    CHECK_FALSE(HealthStateMachine::Allowed(State::kStopping, s));
    if (s != State::kStopping) CHECK_FALSE(HealthStateMachine::Allowed(State::kFailed, s));
  }
  CHECK(HealthStateMachine::Allowed(State::kFailed, State::kStopping));
  HealthStateMachine machine;
  CHECK(machine.TransitionTo(State::kFailed, "budget"));
  CHECK_FALSE(machine.TransitionTo(State::kServing, "no way back"));
  CHECK(machine.state() == State::kFailed);
}

TEST_CASE("an out-of-range state is named UNKNOWN and may not go to STOPPING") {
  const auto bogus = static_cast<State>(99);
  CHECK(StateName(bogus) == "UNKNOWN");
  CHECK_FALSE(HealthStateMachine::Allowed(bogus, State::kStopping));
}

}  // namespace supervisor
