#include "sharemgr/health_publisher.h"

#include <doctest/doctest.h>
#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "sharemgr/health_names.h"
#include "tests/support/wait_for.h"

namespace sharemgr {
namespace {

using std::chrono::milliseconds;
using supervisor::State;

class FakeHealth : public grpc::HealthCheckServiceInterface {
 public:
  void SetServingStatus(const std::string& name, bool serving) override {
    std::lock_guard lock(mu_);
    status_[name] = serving;
    ++sets_[name];
  }
  void SetServingStatus(bool serving) override {
    std::lock_guard lock(mu_);
    for (auto& [name, value] : status_) value = serving;
  }
  bool Get(const std::string& name) {
    std::lock_guard lock(mu_);
    return status_.at(name);
  }
  // How often a status was set: each set is a message to every Watch stream.
  int Sets(const std::string& name) {
    std::lock_guard lock(mu_);
    return sets_[name];
  }

 private:
  std::mutex mu_;
  std::map<std::string, bool> status_;
  std::map<std::string, int> sets_;
};

bool WaitUntil(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return false;
}

}  // namespace

TEST_CASE("readiness follows SERVING, liveness fails only for FAILED") {
  FakeHealth health;
  HealthPublisher publisher(
      {&health}, [] { return base::Clock::now(); }, milliseconds(1000));
  CHECK_FALSE(health.Get(""));  // starts NOT_SERVING
  CHECK_FALSE(health.Get(kReadinessService));
  CHECK(health.Get(kLivenessService));
  publisher.OnState(State::kServing);
  CHECK(health.Get(""));
  CHECK(health.Get(kReadinessService));
  publisher.OnState(State::kDegraded);
  CHECK_FALSE(health.Get(kReadinessService));
  CHECK(health.Get(kLivenessService));  // restarting in place: a pod restart would not help
  publisher.OnState(State::kStopping);
  CHECK_FALSE(health.Get(""));
  CHECK(health.Get(kLivenessService));
  publisher.OnState(State::kFailed);
  CHECK_FALSE(health.Get(kLivenessService));
}

TEST_CASE("the API port's and the health port's health services get the same answers") {
  FakeHealth api, probes;
  HealthPublisher publisher(
      {&api, &probes}, [] { return base::Clock::now(); }, milliseconds(1000));
  for (auto* health : {&api, &probes}) {
    CHECK_FALSE(health->Get(kReadinessService));
    CHECK(health->Get(kLivenessService));
  }
  publisher.OnState(State::kServing);
  for (auto* health : {&api, &probes}) {
    CHECK(health->Get(""));
    CHECK(health->Get(kReadinessService));
  }
  publisher.OnState(State::kFailed);
  for (auto* health : {&api, &probes}) {
    CHECK_FALSE(health->Get(kReadinessService));
    CHECK_FALSE(health->Get(kLivenessService));
  }
}

TEST_CASE("Watch streams get changes only, not a repeat per state change") {
  FakeHealth health;
  HealthPublisher publisher(
      {&health}, [] { return base::Clock::now(); }, milliseconds(1000));
  publisher.OnState(State::kDegraded);  // STARTING -> DEGRADED: NOT_SERVING both
  publisher.OnState(State::kStarting);  // ganesha restarting: still NOT_SERVING
  CHECK(health.Sets(kReadinessService) == 1);
  publisher.OnState(State::kServing);
  CHECK(health.Sets(kReadinessService) == 2);
  CHECK(health.Sets("") == 2);
  CHECK(health.Sets(kLivenessService) == 1);  // live all along
}

TEST_CASE("a supervisor loop that has not started yet is not a stall") {
  FakeHealth health;
  std::atomic<int64_t> tick_ms{0};  // the volume is still being checked and mounted
  HealthPublisher publisher(
      {&health}, [&] { return base::TimePoint(milliseconds(tick_ms.load())); }, milliseconds(50));
  // A negative wait, the assertion itself: for sixteen watchdog checks (every
  // 50 ms / 4), checked all along, the loop never ran and liveness never flips.
  CHECK(testing_support::HoldsFor(
      [&] { return health.Get(kLivenessService) && health.Sets(kLivenessService) == 1; },
      milliseconds(200)));

  tick_ms = 1;  // it ran once, long ago, and is stuck since
  CHECK(WaitUntil([&] { return !health.Get(kLivenessService); }));
}

TEST_CASE("a supervisor loop that stops ticking turns liveness NOT_SERVING, and back") {
  FakeHealth health;
  std::atomic<int64_t> tick_ms{
      std::chrono::duration_cast<milliseconds>(base::Clock::now().time_since_epoch()).count()};
  std::atomic<bool> ticking{true};
  std::thread loop([&] {
    while (ticking) {
      tick_ms =
          std::chrono::duration_cast<milliseconds>(base::Clock::now().time_since_epoch()).count();
      std::this_thread::sleep_for(milliseconds(10));
    }
  });
  {
    // A limit a hundred ticks long: a busy machine delaying the ticking
    // thread cannot pass for a stall.
    constexpr milliseconds kStallLimit(1000);
    HealthPublisher publisher(
        {&health}, [&] { return base::TimePoint(milliseconds(tick_ms.load())); }, kStallLimit);
    publisher.OnState(State::kServing);
    // A negative wait, the assertion itself: for two watchdog checks (every
    // 250 ms) of a ticking loop, checked all along, liveness is never set
    // again (no flip and back).
    CHECK(testing_support::HoldsFor(
        [&] { return health.Get(kLivenessService) && health.Sets(kLivenessService) == 1; },
        milliseconds(600)));

    ticking = false;  // the loop is stuck from now on
    loop.join();
    CHECK(WaitUntil([&] { return !health.Get(kLivenessService); }));
    // Not before the limit: silent for at least that long when it flipped.
    CHECK(base::Clock::now() - base::TimePoint(milliseconds(tick_ms.load())) >= kStallLimit);
    CHECK(health.Get(kReadinessService));  // readiness is the state's business, not the watchdog's

    tick_ms = std::chrono::duration_cast<milliseconds>(
                  (base::Clock::now() + std::chrono::hours(1)).time_since_epoch())
                  .count();  // ticks again
    CHECK(WaitUntil([&] { return health.Get(kLivenessService); }));
  }
}

}  // namespace sharemgr
