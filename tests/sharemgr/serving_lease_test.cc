// The serving lease keeper's timing on a fake clock and a fake store. The
// keeper against a real etcd, and a real share-manager fencing itself, are
// tests/integration/serving_lease_test.cc.
#include "sharemgr/serving_lease.h"

#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "tests/support/fake_time_source.h"
#include "tests/support/log_capture.h"
#include "tests/support/scripted_lease_store.h"
#include "tests/support/wait_for.h"

namespace sharemgr {
namespace {

using base::Duration;
using base::TimePoint;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Attempt = LeaseBackend::Attempt;
using Renewal = LeaseBackend::Renewal;

constexpr uint64_t kEpoch = 5;
// TTL 9 s: renewals every 3 s, fence margin 1.8 s (TTL/5), calls bounded by 1.5 s.
constexpr Duration kTtl = seconds(9);
constexpr Duration kMargin = milliseconds(1800);
constexpr Duration kRenew = seconds(3);
constexpr Duration kCallTimeout = milliseconds(1500);
constexpr Duration kDrift = milliseconds(700);
constexpr Duration kAcquireTimeout = seconds(40);

// The serving lease's store, as each test scripts it.
class FakeBackend final : public LeaseBackend,
                          public testing_support::ScriptedLeaseStore<Attempt, Renewal> {
 public:
  explicit FakeBackend(testing_support::FakeTimeSource& clock)
      : ScriptedLeaseStore(clock,
                           Attempt{.outcome = Attempt::Outcome::kTaken, .granted_ttl_seconds = 9},
                           Renewal{.ttl_seconds = 9}) {}

  absl::StatusOr<Attempt> TryAcquire(int64_t ttl_seconds, TimePoint deadline) override {
    return AnswerAcquire(ttl_seconds, deadline);
  }
  absl::StatusOr<bool> WaitReleased(TimePoint deadline) override { return AnswerWait(deadline); }
  absl::StatusOr<Renewal> KeepAlive(TimePoint deadline) override {
    return AnswerKeepAlive(deadline);
  }
  absl::Status Revoke(TimePoint deadline) override { return AnswerRelease(deadline); }
};

struct Fixture {
  testing_support::FakeTimeSource clock;
  FakeBackend backend{clock};
  int taken = 0;
  std::vector<std::string> lost;
  // Each renewed hook's valid_until, and what the keeper answered meanwhile
  // (it must not hold its lock while it calls out).
  std::vector<std::pair<TimePoint, std::optional<TimePoint>>> renewed;
  ServingLease lease{
      backend, clock,
      ServingLeaseOptions{
          .epoch = kEpoch, .ttl = kTtl, .drift_margin = kDrift, .acquire_timeout = kAcquireTimeout},
      ServingLease::Hooks{
          .taken = [this] { ++taken; },
          .lost = [this](const std::string& why) { lost.push_back(why); },
          .renewed =
              [this](TimePoint until) { renewed.emplace_back(until, lease.valid_until()); }}};
  const TimePoint t0 = clock.Now();

  void RunUntil(TimePoint until) { testing_support::StepKeeperUntil(lease, clock, until); }
};

}  // namespace

TEST_CASE("lease timings derive from the TTL: fence margin, renewals, call bound, drift") {
  CHECK(LeaseFenceMargin(seconds(10)) == seconds(2));
  CHECK(LeaseFenceMargin(seconds(2)) == milliseconds(500));  // TTL/5 would be 400 ms
  CHECK(LeaseRenewInterval(seconds(9)) == seconds(3));
  CHECK(LeaseCallTimeout(seconds(9)) == milliseconds(1500));
  CHECK(LeaseCallTimeout(seconds(1)) == milliseconds(250));
  CHECK(LeaseCallTimeout(seconds(300)) == seconds(2));
  CHECK(LeaseRetryPause(seconds(9)) == milliseconds(450));
  CHECK(LeaseRetryPause(seconds(300)) == milliseconds(500));
  CHECK(LeaseRetryPause(milliseconds(500)) == milliseconds(50));
  CHECK(DefaultLeaseDriftMargin(seconds(10)) == milliseconds(500));
  CHECK(DefaultLeaseDriftMargin(seconds(300)) == seconds(6));
}

TEST_CASE("the lease: taken at once, valid until the grant's send time + TTL - margin") {
  Fixture f;
  CHECK_FALSE(f.lease.ValidAt(f.t0));
  const TimePoint next = f.lease.Step();
  CHECK(f.taken == 1);
  REQUIRE(f.backend.acquires.size() == 1);
  CHECK(f.backend.asked_ttl == 9);
  CHECK(f.backend.acquires[0].deadline == f.t0 + kCallTimeout);
  CHECK(next == f.t0 + kRenew);
  CHECK(f.lease.valid_until() == f.t0 + kTtl - kMargin);
  CHECK(f.lease.ValidAt(f.t0 + kTtl - kMargin - milliseconds(1)));
  CHECK_FALSE(f.lease.ValidAt(f.t0 + kTtl - kMargin));
  CHECK(f.lost.empty());
}

TEST_CASE("an acquire confirmed only after its validity ended is lost, never served, and revoked") {
  Fixture f;
  // The store took it, but the answer came 8 s after the ask: etcd may have
  // let the lease expire (and a replacement in) before anyone here knew.
  f.backend.acquire = [&f](TimePoint) {
    f.clock.Advance(kTtl - kMargin);
    return Attempt{.outcome = Attempt::Outcome::kTaken, .granted_ttl_seconds = 9};
  };
  CHECK(f.lease.Step() == TimePoint::max());
  CHECK(f.taken == 0);
  REQUIRE(f.lost.size() == 1);
  CHECK(f.lost[0].find("confirmed only after its validity ended") != std::string::npos);
  CHECK_FALSE(f.lease.ValidAt(f.clock.Now()));
  CHECK_FALSE(f.lease.valid_until().has_value());
  REQUIRE(f.lease.Stop(ServingLease::StopMode::kRevoke).ok());
  CHECK(f.backend.releases.size() == 1);
}

TEST_CASE("the lease is renewed every TTL/3, each renewal counted from its send time") {
  Fixture f;
  f.lease.Step();
  // Each answer takes 1 s: validity runs from when the renewal was sent.
  f.backend.keep_alive = [&f](TimePoint) {
    f.clock.Advance(seconds(1));
    return Renewal{.ttl_seconds = 9};
  };
  // Before the renewal is due, a step does nothing.
  f.clock.AdvanceTo(f.t0 + kRenew - milliseconds(1));
  CHECK(f.lease.Step() == f.t0 + kRenew);
  CHECK(f.backend.renewals.empty());

  f.RunUntil(f.t0 + seconds(30));
  REQUIRE(f.backend.renewals.size() == 10);
  for (size_t i = 0; i < f.backend.renewals.size(); ++i) {
    CAPTURE(i);
    CHECK(f.backend.renewals[i].at == f.t0 + kRenew * static_cast<int>(i + 1));
    CHECK(f.backend.renewals[i].deadline == f.backend.renewals[i].at + kCallTimeout);
  }
  CHECK(f.lease.valid_until() == f.backend.renewals.back().at + kTtl - kMargin);
  // Each renewal told, with the validity it gave.
  REQUIRE(f.renewed.size() == f.backend.renewals.size());
  for (size_t i = 0; i < f.renewed.size(); ++i) {
    CAPTURE(i);
    CHECK(f.renewed[i].first == f.backend.renewals[i].at + kTtl - kMargin);
    CHECK(f.renewed[i].second == f.renewed[i].first);
  }
  CHECK(f.taken == 1);
  CHECK(f.lost.empty());
}

TEST_CASE("a store granting more than the TTL asked does not stretch the validity") {
  Fixture f;
  f.backend.acquire = [](TimePoint) {
    return Attempt{.outcome = Attempt::Outcome::kTaken, .granted_ttl_seconds = 60};
  };
  f.backend.keep_alive = [](TimePoint) { return Renewal{.ttl_seconds = 60}; };
  f.lease.Step();
  CHECK(f.lease.valid_until() == f.t0 + kTtl - kMargin);
  f.RunUntil(f.t0 + kRenew);
  CHECK(f.lease.valid_until() == f.t0 + kRenew + kTtl - kMargin);
}

TEST_CASE("a store granting less than asked shortens the validity") {
  Fixture f;
  f.backend.acquire = [](TimePoint) {
    return Attempt{.outcome = Attempt::Outcome::kTaken, .granted_ttl_seconds = 6};
  };
  f.lease.Step();
  CHECK(f.lease.valid_until() == f.t0 + seconds(6) - kMargin);
}

TEST_CASE("renewals failing: retried, validity unchanged, lost once valid_until passes") {
  Fixture f;
  f.lease.Step();
  f.backend.keep_alive = [](TimePoint) -> absl::StatusOr<Renewal> {
    return absl::UnavailableError("member down");
  };
  const TimePoint valid_until = f.t0 + kTtl - kMargin;
  f.RunUntil(valid_until - milliseconds(1));
  CHECK(f.lost.empty());
  CHECK(f.lease.ValidAt(valid_until - milliseconds(1)));
  CHECK(f.lease.valid_until() == valid_until);
  // Tried again after each retry pause (450 ms) from the first due renewal.
  CHECK(f.backend.renewals.size() == 10);
  for (const auto& call : f.backend.renewals) CHECK(call.deadline <= valid_until);

  CHECK(f.renewed.empty());  // a failed renewal moves nothing
  f.RunUntil(valid_until);
  REQUIRE(f.lost.size() == 1);
  CHECK(f.lost[0].find("no renewal confirmed for 7.2s") != std::string::npos);
  CHECK(f.lost[0].find("member down") != std::string::npos);
  CHECK_FALSE(f.lease.ValidAt(valid_until - milliseconds(1)));
  CHECK_FALSE(f.lease.valid_until().has_value());
  CHECK(f.lease.Step() == TimePoint::max());
  CHECK(f.lost.size() == 1);
}

TEST_CASE("a renewal hanging: bounded by valid_until, and the lease is lost right then") {
  Fixture f;
  f.lease.Step();
  f.backend.keep_alive = f.backend.Hang<Renewal>();
  const TimePoint valid_until = f.t0 + kTtl - kMargin;
  f.RunUntil(valid_until + seconds(5));
  REQUIRE(f.lost.size() == 1);
  REQUIRE_FALSE(f.backend.renewals.empty());
  CHECK(f.backend.renewals.back().deadline == valid_until);
  CHECK(f.clock.Now() == valid_until + seconds(5));
}

TEST_CASE("a renewal confirmed only after valid_until is not taken as one") {
  Fixture f;
  f.lease.Step();
  const TimePoint valid_until = f.t0 + kTtl - kMargin;
  f.backend.keep_alive = [&](TimePoint) -> absl::StatusOr<Renewal> {
    f.clock.AdvanceTo(valid_until);
    return Renewal{.ttl_seconds = 9};
  };
  f.RunUntil(f.t0 + kRenew);
  REQUIRE(f.lost.size() == 1);
  CHECK(f.lost[0].find("only after") != std::string::npos);
  CHECK_FALSE(f.lease.ValidAt(valid_until));
  CHECK(f.renewed.empty());
}

TEST_CASE("a lost lease is told to the hook before it is logged (a log line may block)") {
  testing_support::LogCapture log;  // outlives the keeper
  int logged_before_hook = -1;
  Fixture f;
  f.lease.Step();
  f.backend.keep_alive = [](TimePoint) { return Renewal{.ttl_seconds = 0}; };
  const std::string line = "serving lease of epoch 5: the store says the lease expired";
  ServingLease told(f.backend, f.clock, ServingLeaseOptions{.epoch = kEpoch, .ttl = kTtl},
                    ServingLease::Hooks{
                        .lost = [&](const std::string&) { logged_before_hook = log.Count(line); }});
  told.Step();
  f.clock.Advance(kRenew);
  told.Step();
  CHECK(logged_before_hook == 0);
  CHECK(log.Count(line) == 1);
}

TEST_CASE("a renewal answered with TTL <= 0 loses the lease at once, long before valid_until") {
  for (const int64_t ttl : {0, -1}) {
    CAPTURE(ttl);
    Fixture f;
    f.lease.Step();
    f.backend.keep_alive = [ttl](TimePoint) { return Renewal{.ttl_seconds = ttl}; };
    f.RunUntil(f.t0 + kRenew);
    REQUIRE(f.lost.size() == 1);
    CHECK(f.lost[0].find("expired") != std::string::npos);
    CHECK_FALSE(f.lease.ValidAt(f.t0 + kRenew));
    CHECK(f.lease.Step() == TimePoint::max());
  }
}

TEST_CASE("the lease key deleted or taken by another epoch loses the lease at once") {
  Fixture f;
  f.lease.Step();
  SUBCASE("deleted") {
    f.backend.keep_alive = [](TimePoint) {
      return Renewal{.ttl_seconds = 9, .key = Renewal::Key::kGone};
    };
    f.RunUntil(f.t0 + kRenew);
    REQUIRE(f.lost.size() == 1);
    CHECK(f.lost[0] == "the lease key was deleted");
  }
  SUBCASE("another epoch") {
    f.backend.keep_alive = [](TimePoint) {
      return Renewal{.ttl_seconds = 9, .key = Renewal::Key::kOther, .key_epoch = 6};
    };
    f.RunUntil(f.t0 + kRenew);
    REQUIRE(f.lost.size() == 1);
    CHECK(f.lost[0] == "the lease key holds epoch 6 now");
  }
  CHECK_FALSE(f.lease.ValidAt(f.t0 + kRenew));
}

TEST_CASE("a superseded epoch is never taken and never retried") {
  Fixture f;
  f.backend.acquire = [](TimePoint) {
    return Attempt{.outcome = Attempt::Outcome::kSuperseded, .other_epoch = 7};
  };
  CHECK(f.lease.Step() == TimePoint::max());
  CHECK(f.taken == 0);
  REQUIRE(f.lost.size() == 1);
  CHECK(f.lost[0].find("epoch 5 superseded by 7") != std::string::npos);
  f.RunUntil(f.t0 + seconds(60));
  CHECK(f.backend.acquires.size() == 1);
  CHECK_FALSE(f.lease.ValidAt(f.clock.Now()));
}

TEST_CASE("a holder of the same or a higher epoch is a supersession, not something to wait for") {
  Fixture f;
  f.backend.acquire = [](TimePoint) {
    return Attempt{
        .outcome = Attempt::Outcome::kHeldByOther, .other_epoch = kEpoch, .other_holder = "pod-b"};
  };
  f.RunUntil(f.t0 + seconds(60));
  CHECK(f.backend.waits.empty());
  REQUIRE(f.lost.size() == 1);
  CHECK(f.lost[0].find("superseded by 5") != std::string::npos);
}

TEST_CASE("an older holder: waited out until its key is gone, then the drift margin, then taken") {
  Fixture f;
  f.backend.acquire = [&f](TimePoint) {
    if (f.backend.acquires.size() == 1) {
      return Attempt{
          .outcome = Attempt::Outcome::kHeldByOther, .other_epoch = 4, .other_holder = "pod-a"};
    }
    return Attempt{.outcome = Attempt::Outcome::kTaken, .granted_ttl_seconds = 9};
  };
  const TimePoint released_at = f.t0 + seconds(7) + milliseconds(300);
  f.backend.wait_released = [&](TimePoint deadline) -> absl::StatusOr<bool> {
    if (deadline < released_at) {
      f.clock.AdvanceTo(deadline);
      return false;
    }
    f.clock.AdvanceTo(released_at);
    return true;
  };
  f.RunUntil(released_at + kDrift - milliseconds(1));
  CHECK(f.taken == 0);
  CHECK(f.backend.acquires.size() == 1);
  CHECK_FALSE(f.lease.ValidAt(f.clock.Now()));
  // Waited in slices of one call timeout each.
  REQUIRE(f.backend.waits.size() == 5);
  CHECK(f.backend.waits[1].at == f.t0 + kCallTimeout);

  f.RunUntil(released_at + kDrift);
  CHECK(f.taken == 1);
  REQUIRE(f.backend.acquires.size() == 2);
  CHECK(f.backend.acquires[1].at == released_at + kDrift);
  CHECK(f.lease.valid_until() == released_at + kDrift + kTtl - kMargin);
  CHECK(f.lost.empty());
}

TEST_CASE("an older holder that never goes: given up after the acquire timeout") {
  Fixture f;
  f.backend.acquire = [](TimePoint) {
    return Attempt{
        .outcome = Attempt::Outcome::kHeldByOther, .other_epoch = 4, .other_holder = "pod-a"};
  };
  f.backend.wait_released = f.backend.Hang<bool>();
  f.RunUntil(f.t0 + kAcquireTimeout - milliseconds(1));
  CHECK(f.lost.empty());
  f.RunUntil(f.t0 + kAcquireTimeout + seconds(10));
  REQUIRE(f.lost.size() == 1);
  CHECK(f.lost[0].find("could not take the serving lease of epoch 5 within 40s") !=
        std::string::npos);
  CHECK(f.lost[0].find("still held by epoch 4 (pod-a)") != std::string::npos);
  CHECK(f.backend.waits.back().deadline == f.t0 + kAcquireTimeout);
  CHECK(f.taken == 0);
}

TEST_CASE("a store failing while the lease is taken: retried after a pause, within the timeout") {
  Fixture f;
  f.backend.acquire = [&f](TimePoint) -> absl::StatusOr<Attempt> {
    if (f.backend.acquires.size() < 3) return absl::UnavailableError("no quorum");
    return Attempt{.outcome = Attempt::Outcome::kTaken, .granted_ttl_seconds = 9};
  };
  f.RunUntil(f.t0 + seconds(1));
  REQUIRE(f.backend.acquires.size() == 3);
  CHECK(f.backend.acquires[1].at == f.t0 + milliseconds(450));
  CHECK(f.backend.acquires[2].at == f.t0 + milliseconds(900));
  CHECK(f.taken == 1);

  Fixture never;
  never.backend.acquire = [](TimePoint) -> absl::StatusOr<Attempt> {
    return absl::UnavailableError("no quorum");
  };
  never.RunUntil(never.t0 + kAcquireTimeout + seconds(1));
  REQUIRE(never.lost.size() == 1);
  CHECK(never.lost[0].find("(last: no quorum)") != std::string::npos);
  CHECK(never.taken == 0);
}

TEST_CASE("stopping: revokes a lease taken (kRevoke) and only then, nothing valid after") {
  SUBCASE("held, kRevoke") {
    Fixture f;
    f.lease.Step();
    CHECK(f.lease.Stop(ServingLease::StopMode::kRevoke).ok());
    REQUIRE(f.backend.releases.size() == 1);
    CHECK(f.backend.releases[0].deadline == f.t0 + kCallTimeout);
    CHECK_FALSE(f.lease.ValidAt(f.t0));
    CHECK(f.lease.Step() == TimePoint::max());
    CHECK(f.backend.renewals.empty());
    // Stopping twice revokes once.
    CHECK(f.lease.Stop(ServingLease::StopMode::kRevoke).ok());
    CHECK(f.backend.releases.size() == 1);
  }
  SUBCASE("held, kLetExpire") {
    Fixture f;
    f.lease.Step();
    CHECK(f.lease.Stop(ServingLease::StopMode::kLetExpire).ok());
    CHECK(f.backend.releases.empty());
    CHECK_FALSE(f.lease.ValidAt(f.t0));
  }
  SUBCASE("never taken") {
    Fixture f;
    f.backend.acquire = [](TimePoint) {
      return Attempt{.outcome = Attempt::Outcome::kSuperseded, .other_epoch = 9};
    };
    f.lease.Step();
    CHECK(f.lease.Stop(ServingLease::StopMode::kRevoke).ok());
    CHECK(f.backend.releases.empty());
  }
  SUBCASE("lost after being held: revoked all the same (the replacement need not wait)") {
    Fixture f;
    f.lease.Step();
    f.backend.keep_alive = [](TimePoint) {
      return Renewal{.ttl_seconds = 9, .key = Renewal::Key::kGone};
    };
    f.RunUntil(f.t0 + kRenew);
    REQUIRE(f.lost.size() == 1);
    CHECK(f.lease.Stop(ServingLease::StopMode::kRevoke).ok());
    CHECK(f.backend.releases.size() == 1);
  }
}

TEST_CASE("the keeper thread: takes the lease, keeps it, and Stop joins it and revokes") {
  // The real clock, for the thread's waits; nothing here depends on how fast.
  base::SteadyTimeSource clock;
  testing_support::FakeTimeSource unused;
  FakeBackend backend(unused);
  backend.acquire = [](TimePoint) {
    return Attempt{.outcome = Attempt::Outcome::kTaken, .granted_ttl_seconds = 30};
  };
  backend.keep_alive = [](TimePoint) { return Renewal{.ttl_seconds = 30}; };
  absl::Mutex mu;
  bool taken = false;
  ServingLease lease(backend, clock, ServingLeaseOptions{.epoch = kEpoch, .ttl = seconds(30)},
                     ServingLease::Hooks{.taken =
                                             [&] {
                                               absl::MutexLock lock(&mu);
                                               taken = true;
                                             },
                                         .lost = [](const std::string&) {}});
  lease.Start();
  {
    absl::MutexLock lock(&mu);
    CHECK(mu.AwaitWithTimeout(absl::Condition(&taken), absl::Seconds(20)));
  }
  CHECK(lease.ValidAt(clock.Now()));
  CHECK(lease.Stop(ServingLease::StopMode::kRevoke).ok());
  CHECK(backend.releases.size() == 1);
  CHECK_FALSE(lease.ValidAt(clock.Now()));
}

}  // namespace sharemgr
