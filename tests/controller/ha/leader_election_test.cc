// Leader election's timing on a fake clock and a fake store. The election on
// a real etcd is tests/controller/ha/etcd_election_test.cc; share-controller
// replicas as processes, tests/integration/controller_ha_test.cc.
#include "controller/ha/leader_election.h"

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "tests/support/fake_time_source.h"
#include "tests/support/scripted_lease_store.h"

namespace controller {
namespace {

using base::Duration;
using base::TimePoint;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Campaign = ElectionBackend::Campaign;
using Renewal = etcd::LeaseRenewal;

// TTL 6 s: renewals every 2 s, fence margin 1.2 s (TTL/5), calls bounded by 1 s.
constexpr Duration kTtl = seconds(6);
constexpr Duration kMargin = milliseconds(1200);
constexpr Duration kRenew = seconds(2);
constexpr Duration kCallTimeout = seconds(1);
constexpr Duration kRetryPause = milliseconds(300);
constexpr int64_t kToken = 4242;

// The election's store, as each test scripts it.
class FakeBackend final : public ElectionBackend,
                          public testing_support::ScriptedLeaseStore<Campaign, Renewal> {
 public:
  explicit FakeBackend(testing_support::FakeTimeSource& clock)
      : ScriptedLeaseStore(clock, Campaign{.won = true, .token = kToken, .granted_ttl_seconds = 6},
                           Renewal{.ttl_seconds = 6}) {}

  absl::StatusOr<Campaign> TryLead(int64_t ttl_seconds, TimePoint deadline) override {
    return AnswerAcquire(ttl_seconds, deadline);
  }
  absl::StatusOr<bool> WaitVacant(TimePoint deadline) override { return AnswerWait(deadline); }
  absl::StatusOr<Renewal> KeepAlive(TimePoint deadline) override {
    return AnswerKeepAlive(deadline);
  }
  absl::Status Resign(TimePoint deadline) override { return AnswerRelease(deadline); }
};

struct Fixture {
  testing_support::FakeTimeSource clock;
  FakeBackend backend{clock};
  std::vector<int64_t> elected;
  std::vector<std::string> deposed;
  LeaderElection election{
      backend, clock, LeaderElectionOptions{.id = "ctl-a", .ttl = kTtl},
      LeaderElection::Hooks{.elected = [this](int64_t token) { elected.push_back(token); },
                            .deposed = [this](const std::string& why) { deposed.push_back(why); }}};
  const TimePoint t0 = clock.Now();

  void RunUntil(TimePoint until) { testing_support::StepKeeperUntil(election, clock, until); }
};

}  // namespace

TEST_CASE(
    "elected at once when nobody leads: the token handed out, leading until send + TTL - "
    "margin") {
  Fixture f;
  CHECK_FALSE(f.election.LeadingAt(f.t0));
  CHECK_FALSE(f.election.token().has_value());
  const TimePoint next = f.election.Step();
  REQUIRE(f.elected.size() == 1);
  CHECK(f.elected[0] == kToken);
  CHECK(f.election.token() == kToken);
  REQUIRE(f.backend.acquires.size() == 1);
  CHECK(f.backend.asked_ttl == 6);
  CHECK(f.backend.acquires[0].deadline == f.t0 + kCallTimeout);
  CHECK(next == f.t0 + kRenew);
  CHECK(f.election.valid_until() == f.t0 + kTtl - kMargin);
  CHECK(f.election.LeadingAt(f.t0 + kTtl - kMargin - milliseconds(1)));
  CHECK_FALSE(f.election.LeadingAt(f.t0 + kTtl - kMargin));
  CHECK(f.deposed.empty());
}

TEST_CASE("the leadership is renewed every TTL/3, each renewal counted from its send time") {
  Fixture f;
  f.election.Step();
  f.backend.keep_alive = [&f](TimePoint) {
    f.clock.Advance(milliseconds(500));  // each answer takes 0.5 s
    return Renewal{.ttl_seconds = 6};
  };
  f.RunUntil(f.t0 + seconds(20));
  REQUIRE(f.backend.renewals.size() == 10);
  for (size_t i = 0; i < f.backend.renewals.size(); ++i) {
    CAPTURE(i);
    CHECK(f.backend.renewals[i].at == f.t0 + kRenew * static_cast<int>(i + 1));
    CHECK(f.backend.renewals[i].deadline == f.backend.renewals[i].at + kCallTimeout);
  }
  CHECK(f.election.valid_until() == f.backend.renewals.back().at + kTtl - kMargin);
  CHECK(f.elected.size() == 1);
  CHECK(f.deposed.empty());
}

TEST_CASE("another leads: follow it, never elected, campaign again only once its key is gone") {
  Fixture f;
  bool held_by_b = true;
  f.backend.acquire = [&](TimePoint) {
    if (held_by_b) return Campaign{.won = false, .leader = "ctl-b"};
    return Campaign{.won = true, .token = kToken + 1, .granted_ttl_seconds = 6};
  };
  // The watch waits its whole slice, as it would while ctl-b keeps renewing.
  f.backend.wait_released = [&](TimePoint deadline) -> absl::StatusOr<bool> {
    if (!held_by_b) return true;
    f.clock.AdvanceTo(deadline);
    return false;
  };
  f.RunUntil(f.t0 + seconds(10));
  CHECK(f.elected.empty());
  CHECK_FALSE(f.election.LeadingAt(f.clock.Now()));
  CHECK(f.backend.acquires.size() == 1);  // following is watching, not campaigning
  REQUIRE(f.backend.waits.size() >= 9);
  for (const auto& wait : f.backend.waits) CHECK(wait.deadline == wait.at + kCallTimeout);

  // ctl-b's key goes (it resigned, or etcd expired its lease): campaign at once.
  held_by_b = false;
  const TimePoint gone = f.clock.Now();
  f.RunUntil(gone + milliseconds(1));
  REQUIRE(f.elected.size() == 1);
  CHECK(f.elected[0] == kToken + 1);
  REQUIRE(f.backend.acquires.size() == 2);
  CHECK(f.backend.acquires[1].at == gone);
  CHECK(f.election.LeadingAt(gone));
}

TEST_CASE("a campaign or a watch failing is retried after a pause, never taken as elected") {
  Fixture f;
  int failures = 2;
  f.backend.acquire = [&](TimePoint) -> absl::StatusOr<Campaign> {
    if (failures-- > 0) return absl::UnavailableError("no quorum");
    return Campaign{.won = false, .leader = "ctl-b"};
  };
  f.backend.wait_released = [&](TimePoint) -> absl::StatusOr<bool> {
    return absl::UnavailableError("member down");
  };
  f.RunUntil(f.t0 + seconds(1));
  CHECK(f.elected.empty());
  REQUIRE(f.backend.acquires.size() == 3);
  CHECK(f.backend.acquires[1].at == f.t0 + kRetryPause);
  CHECK(f.backend.acquires[2].at == f.t0 + kRetryPause * 2);
  REQUIRE(f.backend.waits.size() >= 2);
  CHECK(f.backend.waits[1].at == f.backend.waits[0].at + kRetryPause);
}

TEST_CASE("renewals failing: retried, still leading until valid_until, deposed right then") {
  Fixture f;
  f.election.Step();
  f.backend.keep_alive = [](TimePoint) -> absl::StatusOr<Renewal> {
    return absl::UnavailableError("member down");
  };
  const TimePoint valid_until = f.t0 + kTtl - kMargin;
  f.RunUntil(valid_until - milliseconds(1));
  CHECK(f.deposed.empty());
  CHECK(f.election.LeadingAt(f.clock.Now()));
  CHECK(f.backend.renewals.size() > 3);  // every retry pause since the first was due
  f.RunUntil(valid_until);
  REQUIRE(f.deposed.size() == 1);
  CHECK(f.deposed[0].find("no renewal confirmed for 4.8s") != std::string::npos);
  CHECK(f.deposed[0].find("member down") != std::string::npos);
  CHECK_FALSE(f.election.LeadingAt(valid_until - milliseconds(1)));  // final
  // Deposed is final: no more campaigns, renewals or hooks.
  const size_t campaigns = f.backend.acquires.size();
  f.RunUntil(valid_until + seconds(30));
  CHECK(f.backend.acquires.size() == campaigns);
  CHECK(f.deposed.size() == 1);
  CHECK(f.elected.size() == 1);
}

// A replica frozen (SIGSTOP) past its TTL wakes with its clock beyond
// valid_until: before its keeper even steps, it no longer leads; its first
// step deposes it without asking the store.
TEST_CASE("woken past valid_until: not leading before any step, deposed at the first") {
  Fixture f;
  f.election.Step();
  f.clock.Advance(kTtl * 3);
  CHECK_FALSE(f.election.LeadingAt(f.clock.Now()));
  CHECK(f.election.Step() == TimePoint::max());
  REQUIRE(f.deposed.size() == 1);
  CHECK(f.deposed[0].find("no renewal confirmed for 18s") != std::string::npos);
  CHECK(f.backend.renewals.empty());
}

TEST_CASE("a renewal answered TTL <= 0, or the key gone or another's, deposes at once") {
  SUBCASE("expired") {
    Fixture f;
    f.election.Step();
    f.backend.keep_alive = [](TimePoint) { return Renewal{.ttl_seconds = 0}; };
    f.RunUntil(f.t0 + kRenew);
    REQUIRE(f.deposed.size() == 1);
    CHECK(f.deposed[0].find("expired") != std::string::npos);
  }
  SUBCASE("another replica's key") {
    Fixture f;
    f.election.Step();
    f.backend.keep_alive = [](TimePoint) {
      return Renewal{.ttl_seconds = 6, .key = Renewal::Key::kOther, .other = "ctl-b"};
    };
    f.RunUntil(f.t0 + kRenew);
    REQUIRE(f.deposed.size() == 1);
    CHECK(f.deposed[0] == "the lease key holds ctl-b now");
  }
  SUBCASE("confirmed only after valid_until") {
    Fixture f;
    f.election.Step();
    f.backend.keep_alive = [&f](TimePoint) {
      f.clock.Advance(kTtl);
      return Renewal{.ttl_seconds = 6};
    };
    f.RunUntil(f.t0 + kRenew);
    REQUIRE(f.deposed.size() == 1);
    CHECK(f.deposed[0].find("only after") != std::string::npos);
  }
}

TEST_CASE("stopping: resigns only a leadership won, and never says deposed") {
  SUBCASE("leading, kResign") {
    Fixture f;
    f.election.Step();
    CHECK(f.election.Stop(LeaderElection::StopMode::kResign).ok());
    CHECK(f.backend.releases.size() == 1);
    CHECK_FALSE(f.election.LeadingAt(f.t0));
    CHECK(f.deposed.empty());
  }
  SUBCASE("leading, kLetExpire") {
    Fixture f;
    f.election.Step();
    CHECK(f.election.Stop(LeaderElection::StopMode::kLetExpire).ok());
    CHECK(f.backend.releases.empty());
    CHECK_FALSE(f.election.LeadingAt(f.t0));
  }
  SUBCASE("following") {
    Fixture f;
    f.backend.acquire = [](TimePoint) { return Campaign{.won = false, .leader = "ctl-b"}; };
    f.election.Step();
    CHECK(f.election.Stop(LeaderElection::StopMode::kResign).ok());
    CHECK(f.backend.releases.empty());
  }
}

TEST_CASE("the keeper thread: elected, keeps leading, and Stop joins it and resigns") {
  // The real clock, for the thread's waits; nothing here depends on how fast.
  base::SteadyTimeSource clock;
  testing_support::FakeTimeSource unused;
  FakeBackend backend(unused);
  backend.acquire = [](TimePoint) {
    return Campaign{.won = true, .token = kToken, .granted_ttl_seconds = 30};
  };
  backend.keep_alive = [](TimePoint) { return Renewal{.ttl_seconds = 30}; };
  absl::Mutex mu;
  bool elected = false;
  LeaderElection election(backend, clock, LeaderElectionOptions{.id = "ctl-a", .ttl = seconds(30)},
                          LeaderElection::Hooks{.elected =
                                                    [&](int64_t) {
                                                      absl::MutexLock lock(&mu);
                                                      elected = true;
                                                    },
                                                .deposed = [](const std::string&) {}});
  election.Start();
  {
    absl::MutexLock lock(&mu);
    CHECK(mu.AwaitWithTimeout(absl::Condition(&elected), absl::Seconds(20)));
  }
  CHECK(election.LeadingAt(clock.Now()));
  CHECK(election.Stop(LeaderElection::StopMode::kResign).ok());
  CHECK(backend.releases.size() == 1);
  CHECK_FALSE(election.LeadingAt(clock.Now()));
}

}  // namespace controller
