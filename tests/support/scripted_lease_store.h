// What the unit tests of an etcd lease keeper (etcd::LeaseKeeper: the
// share-manager's serving lease, the controller's leader election) share: a
// fake lease store that answers as each test scripts it and records every
// call's time and deadline on a fake clock, and the keeper stepped on that
// clock the way its thread steps it.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/clock.h"
#include "etcd/lease_keeper.h"
#include "tests/support/fake_time_source.h"

namespace testing_support {

// The store's side of one keeper's interface (sharemgr::LeaseBackend,
// controller::ElectionBackend): a test's fake derives from both and forwards
// each of the interface's four calls to the Answer* of the same role.
// `Taken` is what an attempt to take the lease answers, `Renewal` a keep-alive.
template <typename Taken, typename Renewal>
class ScriptedLeaseStore {
 public:
  struct Call {
    base::TimePoint at;
    base::TimePoint deadline;
  };
  template <typename T>
  using Script = std::function<absl::StatusOr<T>(base::TimePoint deadline)>;

  // Unscripted, every attempt answers `taken`, every wait for the holder to
  // go ends at once and every keep-alive answers `renewal`.
  ScriptedLeaseStore(FakeTimeSource& clock, Taken taken, Renewal renewal)
      : acquire([taken = std::move(taken)](base::TimePoint) { return taken; }),
        keep_alive([renewal = std::move(renewal)](base::TimePoint) { return renewal; }),
        clock_(clock) {}

  // A call that hangs until its deadline.
  template <typename T>
  Script<T> Hang() {
    return [this](base::TimePoint deadline) -> absl::StatusOr<T> {
      clock_.AdvanceTo(deadline);
      return absl::DeadlineExceededError("no answer");
    };
  }

  Script<Taken> acquire;
  Script<bool> wait_released = [](base::TimePoint) { return true; };
  Script<Renewal> keep_alive;

  // acquires: attempts to take the lease; waits: for its holder to go;
  // releases: the lease given up (revoked, resigned).
  std::vector<Call> acquires, waits, renewals, releases;
  int64_t asked_ttl = 0;  // of the last attempt, in seconds

 protected:
  absl::StatusOr<Taken> AnswerAcquire(int64_t ttl_seconds, base::TimePoint deadline) {
    acquires.push_back({clock_.Now(), deadline});
    asked_ttl = ttl_seconds;
    return acquire(deadline);
  }
  absl::StatusOr<bool> AnswerWait(base::TimePoint deadline) {
    waits.push_back({clock_.Now(), deadline});
    return wait_released(deadline);
  }
  absl::StatusOr<Renewal> AnswerKeepAlive(base::TimePoint deadline) {
    renewals.push_back({clock_.Now(), deadline});
    return keep_alive(deadline);
  }
  absl::Status AnswerRelease(base::TimePoint deadline) {
    releases.push_back({clock_.Now(), deadline});
    return absl::OkStatus();
  }

 private:
  FakeTimeSource& clock_;
};

// Steps `keeper` the way its thread does until `clock` reaches `until` (or
// the keeper has nothing left to do).
inline void StepKeeperUntil(etcd::LeaseKeeper& keeper, FakeTimeSource& clock,
                            base::TimePoint until) {
  for (int guard = 0; guard < 10'000; ++guard) {
    const base::TimePoint next = keeper.Step();
    if (next == base::TimePoint::max() || next > until) {
      clock.AdvanceTo(until);
      return;
    }
    clock.AdvanceTo(next);
  }
  FAIL("the keeper does not get on");
}

}  // namespace testing_support
