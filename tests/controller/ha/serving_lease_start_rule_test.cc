// The controller's start rule under the serving lease
// (controller/ha/serving_lease_start_rule.h), on a fake clock.
#include "controller/ha/serving_lease_start_rule.h"

#include <doctest/doctest.h>

#include <string>

#include "etcd/serving_lease_record.h"
#include "tests/support/fake_time_source.h"

namespace controller {
namespace {

using std::chrono::milliseconds;

constexpr char kVolume[] = "vol";
constexpr int64_t kLease = 0x1f2e;

struct RuleFixture {
  testing_support::FakeTimeSource clock;
  ServingLeaseStartRule rule{milliseconds(500), milliseconds(200)};

  StartCheck Check(uint64_t epoch, const ServingLeaseKeys& keys) {
    return rule.Check(kVolume, epoch, keys, clock.Now());
  }
};

std::string Holder(uint64_t epoch) {
  return etcd::PaddedEpoch(epoch) + " pod-" + std::to_string(epoch);
}

// Epoch `epoch`'s holder gone: its key absent, its lease not found.
ServingLeaseKeys Gone(uint64_t epoch) {
  return {.recorded = etcd::EpochRecord(epoch, kLease), .recorded_lease_ttl = -1};
}

}  // namespace

TEST_CASE("start rule: the first pod of a volume (nothing recorded) starts at once") {
  RuleFixture f;
  const StartCheck check = f.Check(1, {});
  CHECK(check.ready);
  CHECK_FALSE(check.recorded_epoch.has_value());
  CHECK_FALSE(check.holder_epoch.has_value());
}

TEST_CASE("start rule: a held lease key of a lower epoch is waited for, at the poll") {
  RuleFixture f;
  const StartCheck check =
      f.Check(5, {.holder = Holder(4), .recorded = etcd::EpochRecord(4, kLease)});
  CHECK_FALSE(check.ready);
  CHECK(check.retry_after_ms == 200);
  CHECK(check.waiting_for == "the serving lease of epoch 4 to end");
  CHECK(check.holder_epoch == 4u);
  CHECK(check.recorded_epoch == 4u);
}

TEST_CASE("start rule: an epoch at or below the recorded one never starts, and says what it saw") {
  RuleFixture f;
  for (const uint64_t recorded : {7u, 9u}) {
    CAPTURE(recorded);
    // Key gone and lease gone for long: only the epoch stands in the way.
    CHECK(f.Check(7, Gone(recorded)).ready == false);
    f.clock.Advance(milliseconds(10'000));
    const StartCheck check = f.Check(7, Gone(recorded));
    CHECK_FALSE(check.ready);
    CHECK(check.recorded_epoch == recorded);
    CHECK(check.waiting_for.find(std::to_string(recorded)) != std::string::npos);
  }
  // A record in the old format (no lease) counts the same.
  CHECK_FALSE(f.Check(3, {.recorded = etcd::PaddedEpoch(3)}).ready);
  // Above it: the usual margin, then ready.
  CHECK_FALSE(f.Check(10, Gone(9)).ready);
  f.clock.Advance(milliseconds(500));
  CHECK(f.Check(10, Gone(9)).ready);
}

TEST_CASE("start rule: a live holder's key at or above the epoch is reported as held") {
  RuleFixture f;
  const StartCheck check = f.Check(5, {.holder = Holder(6), .recorded = etcd::EpochRecord(6, 1)});
  CHECK_FALSE(check.ready);
  CHECK(check.holder_epoch == 6u);
  CHECK(check.waiting_for.find("above 6") != std::string::npos);
}

TEST_CASE(
    "start rule: the key deleted by hand while its holder's etcd lease lives waits for the "
    "lease, then the margin from its end") {
  RuleFixture f;
  ServingLeaseKeys keys{.recorded = etcd::EpochRecord(4, kLease), .recorded_lease_ttl = 3};
  for (int i = 0; i < 3; ++i) {
    const StartCheck check = f.Check(5, keys);
    CHECK_FALSE(check.ready);
    CHECK(check.retry_after_ms == 200);
    CHECK(check.waiting_for == "the etcd lease 1f2e of epoch 4 to end (its key is gone)");
    f.clock.Advance(milliseconds(1000));
  }
  // Expired but not yet revoked: etcd's truncated TTL of 0 is not gone.
  keys.recorded_lease_ttl = 0;
  CHECK_FALSE(f.Check(5, keys).ready);
  f.clock.Advance(milliseconds(1000));
  // Not found: gone now, and the margin counts from here, not from when the
  // key was first seen gone.
  keys.recorded_lease_ttl = -1;
  StartCheck check = f.Check(5, keys);
  CHECK_FALSE(check.ready);
  CHECK(check.retry_after_ms == 500);
  f.clock.Advance(milliseconds(499));
  check = f.Check(5, keys);
  CHECK_FALSE(check.ready);
  CHECK(check.retry_after_ms == 1);
  f.clock.Advance(milliseconds(1));
  CHECK(f.Check(5, keys).ready);
}

TEST_CASE("start rule: a record naming a lease whose TTL was not asked counts as held") {
  RuleFixture f;
  const ServingLeaseKeys keys{.recorded = etcd::EpochRecord(4, kLease)};
  CHECK(RecordedLeaseToAsk(keys) == kLease);
  f.clock.Advance(milliseconds(10'000));
  CHECK_FALSE(f.Check(5, keys).ready);
  // With the key held, the lease is not asked about.
  CHECK_FALSE(RecordedLeaseToAsk({.holder = Holder(4), .recorded = etcd::EpochRecord(4, kLease)})
                  .has_value());
}

TEST_CASE("start rule: a reappearing key or lease starts the margin over") {
  RuleFixture f;
  CHECK_FALSE(f.Check(5, Gone(4)).ready);
  f.clock.Advance(milliseconds(400));
  CHECK_FALSE(f.Check(5, {.holder = Holder(4), .recorded = etcd::EpochRecord(4, kLease)}).ready);
  CHECK_FALSE(f.Check(5, Gone(4)).ready);
  f.clock.Advance(milliseconds(400));
  CHECK_FALSE(f.Check(5, Gone(4)).ready);  // 800 ms since the first sighting, 400 since the last
  f.clock.Advance(milliseconds(100));
  CHECK(f.Check(5, Gone(4)).ready);
  // A ready answer ends the count: the next replacement waits its own margin.
  CHECK_FALSE(f.Check(5, Gone(4)).ready);
}

TEST_CASE(
    "start rule: an old-format record (no lease) cannot be asked about: an unknown holder, "
    "waited the margin") {
  RuleFixture f;
  const ServingLeaseKeys keys{.recorded = etcd::PaddedEpoch(4)};
  CHECK_FALSE(RecordedLeaseToAsk(keys).has_value());
  const StartCheck check = f.Check(5, keys);
  CHECK_FALSE(check.ready);
  CHECK(check.recorded_epoch == 4u);
  CHECK(check.waiting_for.find("holder unknown") != std::string::npos);
  f.clock.Advance(milliseconds(500));
  CHECK(f.Check(5, keys).ready);
}

TEST_CASE(
    "start rule: another holder's record, gone unseen between two checks, starts the margin "
    "over") {
  RuleFixture f;
  CHECK_FALSE(f.Check(7, Gone(4)).ready);
  f.clock.Advance(milliseconds(400));
  // Meanwhile epoch 5 took the key, served and ended, all between two asks.
  CHECK_FALSE(f.Check(7, Gone(5)).ready);
  f.clock.Advance(milliseconds(400));
  CHECK_FALSE(f.Check(7, Gone(5)).ready);  // 800 ms since 4 was seen gone, 400 since 5 was
  f.clock.Advance(milliseconds(100));
  CHECK(f.Check(7, Gone(5)).ready);
}

TEST_CASE("start rule: an epoch record that is not an epoch starts nothing, and says so") {
  RuleFixture f;
  for (const std::string bad : {"abc", "-1", "99999999999999999999 1f2e", "12"}) {
    CAPTURE(bad);
    for (int i = 0; i < 3; ++i) {
      const StartCheck check = f.Check(5, {.recorded = bad, .recorded_lease_ttl = -1});
      CHECK_FALSE(check.ready);
      CHECK(check.waiting_for ==
            "the epoch record of vol ('" + bad + "', not an epoch) to be mended by hand");
      f.clock.Advance(milliseconds(10'000));
    }
  }
}

TEST_CASE(
    "start rule: the lease held by the asked epoch itself is its own pod running: not ready, "
    "never 'taken'") {
  RuleFixture f;
  const StartCheck check = f.Check(5, {.holder = Holder(5), .recorded = etcd::EpochRecord(5, 1)});
  CHECK_FALSE(check.ready);
  CHECK(check.holder_epoch == 5u);
  CHECK(check.waiting_for ==
        "the serving lease is held by epoch 5 itself: its pod runs, not yet listed");
}

TEST_CASE("serving lease records: one format for both sides") {
  CHECK(etcd::PaddedEpoch(42) == "00000000000000000042");
  CHECK(etcd::EpochRecord(42, 0xabc) == "00000000000000000042 abc");
  CHECK(etcd::EpochOf("00000000000000000042 abc") == 42u);
  CHECK_FALSE(etcd::EpochOf("42").has_value());
  CHECK(etcd::RecordedLeaseOf("00000000000000000042 abc") == 0xabc);
  CHECK_FALSE(etcd::RecordedLeaseOf("00000000000000000042").has_value());
  CHECK_FALSE(etcd::RecordedLeaseOf("00000000000000000042 0").has_value());
  CHECK(etcd::HolderOf("00000000000000000042 pod-a") == "pod-a");
  CHECK(etcd::HolderOf("00000000000000000042") == "?");
}

}  // namespace controller
