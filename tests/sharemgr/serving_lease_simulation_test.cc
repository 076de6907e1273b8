// A seeded simulation of the serving lease (issue #12): share-managers of one
// volume, each the real ServingLease keeper on its own clock (rates off by up
// to 1% either way, the error the default drift margin covers), against a
// model of etcd's leases, keys and epochs; requests and answers delayed,
// lost, late past their deadlines; share-managers cut off for a while or
// frozen whole (pod and ganesha); new epochs started at any time, older ones
// started late. After every step: never two share-managers serving the
// volume at the same instant. Then, with the faults over, the newest epoch
// serves. A failing seed is printed; replay it with
//   SHARE_SIM_SEED=<seed> ./build/tests/sharemgr_unit_tests -tc='*lease simulation*'
//
// Time: one true time (microseconds) that etcd's clock reads; each
// share-manager reads its own skewed clock of it. A keeper's step, with the
// store call it makes, runs whole at the keeper's turn; etcd applies each
// call at its arrival, never before an arrival it applied already (a call
// overtaken that way just arrived later: a legal history).
//
// "Serving": the daemon fences on its own timer at valid_until (ganesha
// SIGKILLed, the export withdrawn), so a share-manager serves from the taken
// hook until valid_until plus the time a SIGKILL takes, on its own clock,
// unless frozen (a frozen pod's ganesha answers nothing) or lost.
#include <doctest/doctest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/ha/etcd_election.h"
#include "controller/ha/leader_election.h"
#include "controller/ha/serving_lease_start_rule.h"
#include "controller/store/etcd_store.h"
#include "etcd/serving_lease_record.h"
#include "sharemgr/serving_lease.h"

namespace sharemgr {
namespace {

using base::Duration;
using base::TimePoint;
using Micros = int64_t;  // true time

constexpr Micros kMs = 1000;
constexpr Micros kSec = 1000 * kMs;
// SIGKILL of ganesha and the export's withdrawal, after the fence timer fires.
constexpr Micros kStopTime = 100 * kMs;
// A pod Create or Delete the leader decided on, checking LeadingAt right
// before, takes effect up to this long after.
constexpr Micros kActionTime = 100 * kMs;
// How late a follower's model of a watch may learn that the leader's key went.
constexpr Micros kWatchSlice = 20 * kMs;
// The controllers' key prefix P; the one volume.
constexpr char kPrefix[] = "/sim";
constexpr char kVolume[] = "vol";
constexpr char kRecordKey[] = "/sim/shares/vol";

// Spans of true time, [from, to).
using Windows = std::vector<std::pair<Micros, Micros>>;
bool InAnyWindow(const Windows& windows, Micros t) {
  return std::any_of(windows.begin(), windows.end(),
                     [t](const auto& w) { return t >= w.first && t < w.second; });
}

// When a party due at `t` runs: at once, or when the freeze it is in ends.
Micros ThawedAt(const Windows& freezes, Micros t) {
  for (const auto& f : freezes) {
    if (t >= f.first && t < f.second) t = f.second;
  }
  return t;
}

// A clock running at (1 + rate_error) of true time, from `created`.
class SkewedClock final : public base::TimeSource {
 public:
  SkewedClock(Micros created, double rate_error) : created_(created), rate_(1 + rate_error) {}
  TimePoint Now() const override { return LocalAt(at_); }
  TimePoint LocalAt(Micros t) const {
    const double local_us = kBase + static_cast<double>(t - created_) * rate_;
    return TimePoint(std::chrono::microseconds(static_cast<int64_t>(std::floor(local_us))));
  }
  // The first true time at which this clock reads `local` or later.
  Micros TrueAt(TimePoint local) const {
    const double local_us = static_cast<double>(
        std::chrono::duration_cast<std::chrono::microseconds>(local.time_since_epoch()).count());
    Micros t = created_ + static_cast<Micros>(std::ceil((local_us - kBase) / rate_));
    while (LocalAt(t) < local) ++t;
    return t;
  }
  Micros at() const { return at_; }
  // The keeper's time moves forward only.
  void MoveTo(Micros t) { at_ = std::max(at_, t); }

 private:
  static constexpr double kBase = 3600.0 * kSec;  // an uptime, as a steady clock has
  const Micros created_;
  const double rate_;
  Micros at_ = created_;
};

// etcd as the keepers see it: leases with expiry on etcd's (true) clock, the
// lease key and the epochs key of the one volume.
struct EtcdModel {
  struct Lease {
    Micros expiry = 0;
    Micros ttl = 0;
  };
  struct LeaseKey {
    uint64_t epoch = 0;
    int64_t lease = 0;
  };
  // The controllers' election key P/leader (controller/ha/etcd_election.h).
  struct LeaderKey {
    std::string id;
    int64_t lease = 0;
    int64_t create_revision = 0;  // the fencing token of its term
  };
  Micros now = 0;  // the latest arrival applied
  int64_t next_lease = 1;
  std::map<int64_t, Lease> leases;
  std::optional<LeaseKey> key;
  uint64_t recorded_epoch = 0;
  int64_t recorded_lease = 0;  // the lease its holder took it on
  // etcd revokes an expired lease (and deletes its keys) on its lessor's
  // next check, up to this long after the expiry.
  Micros revoke_delay = 0;
  // The election, and the share's record as the leader writes it (the epoch
  // it is to run, its mod revision).
  int64_t revision = 1;
  std::optional<LeaderKey> leader;
  int64_t newest_term = 0;  // the highest token ever won
  uint64_t record_epoch = 1;
  int64_t record_revision = 1;

  // Applies what etcd's lessor did by `t`, and moves etcd's clock there.
  Micros Arrive(Micros t) {
    now = std::max(now, t);
    for (auto it = leases.begin(); it != leases.end();) {
      if (now >= it->second.expiry + revoke_delay) {
        if (key && key->lease == it->first) key.reset();
        if (leader && leader->lease == it->first) leader.reset();
        it = leases.erase(it);
      } else {
        ++it;
      }
    }
    return now;
  }
  // One EQUAL compare of a Txn on the keys modelled (P/leader is created
  // once and never modified: its mod revision is its create revision).
  bool Holds(const etcdserverpb::Compare& compare) const {
    int64_t create = 0, mod = 0;
    if (compare.key() == controller::LeaderKey(kPrefix) && leader) {
      create = mod = leader->create_revision;
    } else if (compare.key() == kRecordKey) {
      create = 1;
      mod = record_revision;
    }
    if (compare.result() != etcdserverpb::Compare::EQUAL) return false;  // not used
    switch (compare.target()) {
      case etcdserverpb::Compare::CREATE:
        return create == compare.create_revision();
      case etcdserverpb::Compare::MOD:
        return mod == compare.mod_revision();
      default:
        return false;  // not used
    }
  }
  int64_t Grant(Micros ttl) {
    leases[next_lease] = {now + ttl, ttl};
    return next_lease++;
  }

  // EtcdStore::Update of the record to `epoch` with the leader's write guard:
  // one Txn, the record's mod revision compared and the guard's compare
  // (the real AddGuardCompare) added, applied as etcd applies a Txn.
  enum class Written { kDone, kConflict, kNotLeader };
  Written Update(const controller::WriteGuard& guard, int64_t read_revision, uint64_t epoch) {
    etcdserverpb::TxnRequest txn;
    auto& same = *txn.add_compare();
    same.set_key(kRecordKey);
    same.set_target(etcdserverpb::Compare::MOD);
    same.set_mod_revision(read_revision);
    controller::AddGuardCompare(txn, guard);
    bool succeeded = true;
    for (const auto& compare : txn.compare()) succeeded = succeeded && Holds(compare);
    if (!succeeded) {
      // As EtcdStore: the guard's key read on failure tells "not leader".
      const bool guard_holds = leader && guard.key == controller::LeaderKey(kPrefix) &&
                               leader->create_revision == guard.revision;
      return guard_holds ? Written::kConflict : Written::kNotLeader;
    }
    // Landed: only with its writer's fencing token valid here and now (its
    // term's key still there) and its term the newest: a deposed leader's
    // write is refused by the guard's compare.
    REQUIRE_MESSAGE(leader.has_value(), "a write of term ", guard.revision,
                    " landed with no leader's key in etcd");
    REQUIRE_MESSAGE(leader->create_revision == guard.revision, "a write of term ", guard.revision,
                    " landed while term ", leader->create_revision, " holds the key");
    REQUIRE_MESSAGE(guard.revision == newest_term, "a write of term ", guard.revision,
                    " landed after term ", newest_term, " was won");
    record_epoch = epoch;
    record_revision = ++revision;
    return Written::kDone;
  }
  // LeaseTimeToLive: whole seconds left, truncated (0 or less once expired,
  // until revoked), -1 when not found.
  int64_t TimeToLive(int64_t lease) const {
    auto it = leases.find(lease);
    return it == leases.end() ? -1 : (it->second.expiry - now) / kSec;
  }
  bool Alive(int64_t lease) const {
    auto it = leases.find(lease);
    return it != leases.end() && now < it->second.expiry;
  }
};

// The network between one share-manager and etcd.
struct Link {
  std::mt19937_64* rng = nullptr;
  double loss = 0;  // of a request, and of an answer
  Micros max_delay = 20 * kMs;
  double stall_chance = 0;                                 // a delay of up to 3 s instead
  Windows cuts;                                            // nothing passes
  Micros faults_end = std::numeric_limits<Micros>::max();  // no loss nor stall from then on

  bool Cut(Micros t) const { return InAnyWindow(cuts, t); }
  bool Lost(Micros t) {
    if (Cut(t)) return true;
    const bool lost = std::bernoulli_distribution(loss)(*rng);
    return lost && t < faults_end;
  }
  Micros Delay(Micros t) {
    if (std::bernoulli_distribution(stall_chance)(*rng) && t < faults_end) {
      return std::uniform_int_distribution<Micros>(0, 3 * kSec)(*rng);
    }
    return std::uniform_int_distribution<Micros>(0, max_delay)(*rng);
  }
};

// One party's calls to etcd through its link, on its clock: each call is
// applied at its arrival and answered after the return delay, or times out
// at its deadline.
class Wire {
 public:
  Wire(EtcdModel& etcd, Link& link, SkewedClock& clock) : etcd_(etcd), link_(link), clock_(clock) {}

  template <typename T, typename Apply>
  absl::StatusOr<T> Call(TimePoint deadline, Apply apply) {
    const Micros sent = clock_.at();
    const Micros deadline_true = clock_.TrueAt(deadline);
    if (link_.Lost(sent)) return TimeOut(deadline_true);
    const Micros arrived = etcd_.Arrive(sent + link_.Delay(sent));
    if (arrived >= deadline_true + 3 * kSec) return TimeOut(deadline_true);  // gave up long ago
    const T answer = apply();
    const Micros answered = arrived + link_.Delay(arrived);
    if (answered >= deadline_true || link_.Lost(arrived)) return TimeOut(deadline_true);
    clock_.MoveTo(answered);
    return answer;
  }
  // A watch that found nothing: it answers at the deadline (later than a
  // real watch would say so: never earlier).
  void WaitOut(TimePoint deadline) { clock_.MoveTo(clock_.TrueAt(deadline)); }

 private:
  absl::Status TimeOut(Micros deadline_true) {
    clock_.MoveTo(deadline_true);
    return absl::DeadlineExceededError("no answer by the deadline");
  }

  EtcdModel& etcd_;
  Link& link_;
  SkewedClock& clock_;
};

// One share-manager's view of etcd through its link.
class SimBackend final : public LeaseBackend {
 public:
  SimBackend(EtcdModel& etcd, Link& link, SkewedClock& clock, uint64_t epoch)
      : etcd_(etcd), wire_(etcd, link, clock), epoch_(epoch) {}

  // As EtcdLeaseBackend: an attempt whose answer never came may have taken
  // the key; a later attempt that finds it on that lease renews and adopts it.
  absl::StatusOr<Attempt> TryAcquire(int64_t ttl_seconds, TimePoint deadline) override {
    auto attempt = wire_.Call<Attempt>(deadline, [&]() -> Attempt {
      if (etcd_.key && etcd_.Alive(etcd_.key->lease) &&
          std::find(unsettled_.begin(), unsettled_.end(), etcd_.key->lease) != unsettled_.end()) {
        auto& lease = etcd_.leases[etcd_.key->lease];
        lease.expiry = etcd_.now + lease.ttl;
        lease_ = etcd_.key->lease;
        return Attempt{.outcome = Attempt::Outcome::kTaken,
                       .granted_ttl_seconds = lease.ttl / kSec};
      }
      if (etcd_.key) {
        return Attempt{.outcome = Attempt::Outcome::kHeldByOther, .other_epoch = etcd_.key->epoch};
      }
      if (etcd_.recorded_epoch >= epoch_) {
        return Attempt{.outcome = Attempt::Outcome::kSuperseded,
                       .other_epoch = etcd_.recorded_epoch};
      }
      lease_ = etcd_.next_lease++;
      unsettled_.push_back(lease_);  // settled by the answer, if it comes
      etcd_.leases[lease_] = {etcd_.now + ttl_seconds * kSec, ttl_seconds * kSec};
      etcd_.key = EtcdModel::LeaseKey{epoch_, lease_};
      etcd_.recorded_epoch = epoch_;
      etcd_.recorded_lease = lease_;
      return Attempt{.outcome = Attempt::Outcome::kTaken, .granted_ttl_seconds = ttl_seconds};
    });
    if (attempt.ok() && attempt->outcome == Attempt::Outcome::kTaken) unsettled_.clear();
    return attempt;
  }
  absl::StatusOr<bool> WaitReleased(TimePoint deadline) override {
    // The watch's answer comes at the deadline if the key is still there on
    // arrival (later than a real watch would say so: never earlier).
    auto released = wire_.Call<bool>(deadline, [&] { return !etcd_.key.has_value(); });
    if (released.ok() && !*released) wire_.WaitOut(deadline);
    return released;
  }
  absl::StatusOr<Renewal> KeepAlive(TimePoint deadline) override {
    return wire_.Call<Renewal>(deadline, [&]() -> Renewal {
      if (!etcd_.Alive(lease_)) return Renewal{.ttl_seconds = 0};
      auto& lease = etcd_.leases[lease_];
      lease.expiry = etcd_.now + lease.ttl;
      Renewal r{.ttl_seconds = lease.ttl / kSec};
      if (!etcd_.key) {
        r.key = Renewal::Key::kGone;
      } else if (etcd_.key->lease != lease_) {
        r.key = Renewal::Key::kOther;
        r.key_epoch = etcd_.key->epoch;
      }
      return r;
    });
  }
  absl::Status Revoke(TimePoint deadline) override {
    return wire_
        .Call<bool>(deadline,
                    [&] {
                      if (etcd_.key && etcd_.key->lease == lease_) etcd_.key.reset();
                      etcd_.leases.erase(lease_);
                      return true;
                    })
        .status();
  }

 private:
  EtcdModel& etcd_;
  Wire wire_;
  const uint64_t epoch_;
  int64_t lease_ = 0;
  std::vector<int64_t> unsettled_;
};

// One share-manager pod: its clock, link, keeper and what it serves.
struct ShareManager {
  ShareManager(EtcdModel& etcd, std::mt19937_64& rng, Micros created, uint64_t epoch_in, Micros ttl,
               double rate_error)
      : epoch(epoch_in),
        clock(created, rate_error),
        backend(etcd, link, clock, epoch_in),
        lease(backend, clock,
              ServingLeaseOptions{.epoch = epoch_in,
                                  .ttl = Duration(ttl / kMs),
                                  .drift_margin = DefaultLeaseDriftMargin(Duration(ttl / kMs)),
                                  .acquire_timeout = Duration(3 * ttl / kMs)},
              ServingLease::Hooks{.taken = [this] { taken = true; },
                                  .lost = [this](const std::string&) { lost = true; }}) {
    link.rng = &rng;
  }

  bool Frozen(Micros t) const { return InAnyWindow(freezes, t); }
  // Serving at true time t: taken, not lost, and its fence timer (valid_until
  // on its own clock) plus the SIGKILL's time not passed.
  bool ServingAt(Micros t) const {
    if (!taken || lost || stopped || Frozen(t)) return false;
    const auto until = lease.valid_until();
    return until && clock.LocalAt(t - kStopTime) < *until;
  }

  const uint64_t epoch;
  Link link;
  SkewedClock clock;
  SimBackend backend;
  ServingLease lease;
  Micros next_step = 0;  // true time
  Windows freezes;
  bool taken = false;
  bool lost = false;
  bool stopped = false;
};

struct Outcome {
  int epochs_started = 0;
  int epochs_served = 0;
  uint64_t last_serving_epoch = 0;
  // With the controllers modelled: terms won, and writes refused to a
  // deposed leader by the fencing compare.
  int terms = 0;
  int writes_refused = 0;
};

// The pods of the one volume, started and deleted by a controller, and the
// check "never two serving", run after every step of a pod's keeper.
struct Volume {
  Volume(EtcdModel& etcd_in, std::mt19937_64& rng_in, Micros ttl_in, Micros faults_end_in)
      : etcd(etcd_in), rng(rng_in), ttl(ttl_in), faults_end(faults_end_in) {}

  bool Chance(double p) { return std::bernoulli_distribution(p)(rng); }
  Micros Uniform(Micros lo, Micros hi) {
    return std::uniform_int_distribution<Micros>(lo, hi)(rng);
  }
  // Cut off, or frozen whole, for up to 3 TTLs from within a minute of
  // `at`: all over by the end of the faults.
  std::pair<Micros, Micros> FaultWindow(Micros at) {
    const Micros from = std::min(at + Uniform(0, 60 * kSec), faults_end);
    return std::make_pair(from, std::min(from + Uniform(0, 3 * ttl), faults_end));
  }

  void StartPod(Micros at, uint64_t epoch) {
    auto pod = std::make_unique<ShareManager>(etcd, rng, at, epoch, ttl,
                                              std::uniform_real_distribution<>(-0.01, 0.01)(rng));
    pod->next_step = at;
    if (at < faults_end) {
      pod->link.loss = Chance(0.3) ? 0.2 : 0.01;
      pod->link.stall_chance = 0.02;
      pod->link.faults_end = faults_end;
      for (int i = 0; i < 2; ++i) {
        if (Chance(0.4)) pod->link.cuts.push_back(FaultWindow(at));
        if (Chance(0.3)) pod->freezes.push_back(FaultWindow(at));
      }
    }
    pods.push_back(std::move(pod));
    ++outcome.epochs_started;
  }
  // The controller deletes the older pods; a delete reaches no pod that is
  // cut off or frozen (the node is gone: the pod runs on, and must fence
  // itself), and sometimes fails for no reason.
  void DeleteOlder(Micros at, uint64_t epoch, double success) {
    for (auto& p : pods) {
      if (p->epoch >= epoch || p->stopped || p->Frozen(at) || p->link.Cut(at) || !Chance(success)) {
        continue;
      }
      p->stopped = true;  // ganesha stopped first
      p->clock.MoveTo(at);
      if (Chance(0.8)) p->lease.Stop(ServingLease::StopMode::kRevoke).IgnoreError();
    }
  }
  // The keeper due next, or nullptr.
  ShareManager* Due() const {
    ShareManager* due = nullptr;
    for (const auto& pod : pods) {
      if (pod->stopped || pod->lost || pod->next_step == std::numeric_limits<Micros>::max()) {
        continue;
      }
      if (due == nullptr || pod->next_step < due->next_step) due = pod.get();
    }
    return due;
  }
  // One step of `pod`'s keeper at its due time (a frozen keeper runs nothing
  // until it thaws; its fence timer fires at the thaw: ServingAt counts the
  // frozen time as not serving), then the check.
  void Step(ShareManager& pod) {
    const Micros at = ThawedAt(pod.freezes, pod.next_step);
    if (at != pod.next_step) {
      pod.next_step = at;
      return;
    }
    pod.clock.MoveTo(at);
    const bool was_taken = pod.taken;
    const TimePoint next = pod.lease.Step();
    pod.next_step = next == TimePoint::max() ? std::numeric_limits<Micros>::max()
                                             : std::max(pod.clock.TrueAt(next), pod.clock.at());
    if (pod.taken && !was_taken) ++outcome.epochs_served;
    // Never two serving: checked at every instant a keeper's step ends (a
    // pod starts serving only at the end of its step).
    RequireOneServing(pod.clock.at());
    // A pod that could not take the lease, or lost it, is deleted (it exits).
    if (pod.lost) pod.stopped = true;
  }
  void RequireOneServing(Micros t) const {
    int serving = 0;
    std::string who;
    for (const auto& p : pods) {
      if (p->ServingAt(t)) {
        ++serving;
        who += " epoch " + std::to_string(p->epoch);
      }
    }
    REQUIRE_MESSAGE(serving <= 1, "two serving at t=", t, " us:", who, " (TTL ", ttl / kSec, " s)");
  }
  // The newest epoch started (the controller's view of the share), or nullptr.
  const ShareManager* Newest() const {
    const ShareManager* newest = nullptr;
    for (const auto& p : pods) {
      if (newest == nullptr || p->epoch > newest->epoch) newest = p.get();
    }
    return newest;
  }
  uint64_t ServingEpochAt(Micros t) const {
    for (const auto& p : pods) {
      if (p->ServingAt(t)) return p->epoch;
    }
    return 0;
  }

  EtcdModel& etcd;
  std::mt19937_64& rng;
  const Micros ttl;
  const Micros faults_end;
  std::vector<std::unique_ptr<ShareManager>> pods;
  Outcome outcome;
};

Outcome RunSeed(uint64_t seed) {
  INFO("replay: SHARE_SIM_SEED=", seed,
       " ./build/tests/sharemgr_unit_tests -tc='*lease simulation*'");
  std::mt19937_64 rng(seed);
  const Micros ttl = std::uniform_int_distribution<Micros>(2, 10)(rng) * kSec;  // whole seconds
  EtcdModel etcd;
  etcd.revoke_delay = std::uniform_int_distribution<Micros>(0, 500)(rng) * kMs;
  const Micros faults_end = 10 * 60 * kSec;
  const Micros end = faults_end + 4 * ttl;
  Volume volume(etcd, rng, ttl, faults_end);
  uint64_t highest_epoch = 0;

  // The controller: a new epoch now and then (often far too early: the
  // keepers must be safe whatever it does), sometimes an old epoch's pod
  // starting late.
  Micros next_start = 0;
  for (;;) {
    // The earliest due event: a keeper's step or the next pod start.
    ShareManager* due = volume.Due();
    const Micros now = due != nullptr ? std::min(due->next_step, next_start) : next_start;
    if (now >= end) break;
    if (due == nullptr || next_start <= due->next_step) {
      const bool last = next_start >= faults_end;
      const bool late_old = !last && highest_epoch > 1 && volume.Chance(0.1);
      const uint64_t epoch = late_old ? highest_epoch - 1 : ++highest_epoch;
      volume.DeleteOlder(next_start, epoch, last ? 1.0 : 0.7);
      volume.StartPod(next_start, epoch);
      if (last) {
        next_start = std::numeric_limits<Micros>::max();
      } else {
        // With the faults over, one last epoch that must end up serving.
        next_start = std::min(next_start + volume.Uniform(1, 4 * ttl / kSec) * kSec, faults_end);
      }
      continue;
    }
    volume.Step(*due);
  }
  volume.outcome.last_serving_epoch = volume.ServingEpochAt(end - 1);
  // With the faults over since 4 TTLs, the newest epoch serves.
  CHECK_MESSAGE(volume.outcome.last_serving_epoch == highest_epoch, "newest epoch ", highest_epoch,
                " is not serving at the end (TTL ", ttl / kSec, " s)");
  return volume.outcome;
}

// A share-controller replica's view of the election through its link, as
// controller/ha/etcd_election.cc keeps it: a fresh lease per campaign, the key
// created only when absent (its create_revision the token), a lost answer's
// lease revoked (with the key, if that campaign had won), a follower waiting
// until the key is gone and its leader's lease too.
class SimElectionBackend final : public controller::ElectionBackend {
 public:
  SimElectionBackend(EtcdModel& etcd, Link& link, SkewedClock& clock, std::string id, Duration ttl)
      : etcd_(etcd),
        wire_(etcd, link, clock),
        clock_(clock),
        id_(std::move(id)),
        call_timeout_(etcd::LeaseCallTimeout(ttl)) {}

  absl::StatusOr<Campaign> TryLead(int64_t ttl_seconds, TimePoint deadline) override {
    int64_t granted = 0, holder_lease = 0;
    auto campaign = wire_.Call<Campaign>(deadline, [&]() -> Campaign {
      granted = etcd_.Grant(ttl_seconds * kSec);
      if (!etcd_.leader) {
        etcd_.leader = EtcdModel::LeaderKey{id_, granted, ++etcd_.revision};
        etcd_.newest_term = etcd_.leader->create_revision;
        return Campaign{.won = true,
                        .token = etcd_.leader->create_revision,
                        .granted_ttl_seconds = ttl_seconds};
      }
      etcd_.leases.erase(granted);  // RevokeUnusedLease
      holder_lease = etcd_.leader->lease;
      return Campaign{.won = false, .leader = etcd_.leader->id};
    });
    if (!campaign.ok()) {
      if (granted != 0) Revoke(granted).IgnoreError();  // as the real one does, not knowing
      return campaign;
    }
    if (campaign->won) {
      lease_ = granted;
    } else {
      leader_lease_ = holder_lease;
    }
    return campaign;
  }
  // A watch tells of the key's end as it happens: modelled as a look every
  // kWatchSlice (a follower never learns it much later than a real one
  // would, so a leader acting too long is caught).
  absl::StatusOr<bool> WaitVacant(TimePoint deadline) override {
    auto vacant = wire_.Call<bool>(
        deadline, [&] { return !etcd_.leader && etcd_.leases.count(leader_lease_) == 0; });
    if (vacant.ok() && !*vacant) {
      wire_.WaitOut(
          std::min(deadline, clock_.Now() + std::chrono::milliseconds(kWatchSlice / kMs)));
    }
    return vacant;
  }
  absl::StatusOr<etcd::LeaseRenewal> KeepAlive(TimePoint deadline) override {
    return wire_.Call<etcd::LeaseRenewal>(deadline, [&]() -> etcd::LeaseRenewal {
      if (!etcd_.Alive(lease_)) return etcd::LeaseRenewal{.ttl_seconds = 0};
      auto& lease = etcd_.leases[lease_];
      lease.expiry = etcd_.now + lease.ttl;
      etcd::LeaseRenewal r{.ttl_seconds = lease.ttl / kSec};
      if (!etcd_.leader) {
        r.key = etcd::LeaseRenewal::Key::kGone;
      } else if (etcd_.leader->lease != lease_) {
        r.key = etcd::LeaseRenewal::Key::kOther;
        r.other = etcd_.leader->id;
      }
      return r;
    });
  }
  absl::Status Resign(TimePoint deadline) override {
    (void)deadline;
    return Revoke(lease_);
  }

 private:
  // Bounded as every call of the keeper (etcd::LeaseCallTimeout).
  absl::Status Revoke(int64_t lease) {
    return wire_
        .Call<bool>(clock_.Now() + call_timeout_,
                    [&] {
                      if (etcd_.leader && etcd_.leader->lease == lease) etcd_.leader.reset();
                      etcd_.leases.erase(lease);
                      return true;
                    })
        .status();
  }

  EtcdModel& etcd_;
  Wire wire_;
  SkewedClock& clock_;
  const std::string id_;
  const Duration call_timeout_;
  int64_t lease_ = 0;         // won with
  int64_t leader_lease_ = 0;  // the leader's, waited out
};

// One share-controller replica: the real LeaderElection on its own clock,
// the real start rule (ServingLeaseGate's), and what the leader does with
// them: replace the share's pod (epoch + 1) once the rule says so, by a
// write fenced on its term, then create the pod only while still leading
// (LeaderGatedRuntime). Deposed (a refused write, a gate refusal, the
// election lost) it stops acting, as share-controller exits 3.
struct Replica {
  Replica(EtcdModel& etcd, std::mt19937_64& rng, Micros created, const std::string& id, Micros ttl,
          Micros pod_ttl, double rate_error)
      : clock(created, rate_error),
        wire(etcd, link, clock),
        backend(etcd, link, clock, id, Duration(ttl / kMs)),
        election(backend, clock, {.id = id, .ttl = Duration(ttl / kMs)},
                 {.elected = [this](int64_t t) { token = t; },
                  .deposed = [this](const std::string&) { deposed = true; }}),
        rule(etcd::DefaultLeaseDriftMargin(Duration(pod_ttl / kMs)), Duration(200)) {
    link.rng = &rng;
    next_step = created;
  }

  bool Frozen(Micros t) const { return InAnyWindow(freezes, t); }
  // Acting at true time t: the real LeadingAt on its own clock held at t,
  // or up to kActionTime before (an action it began then still takes
  // effect), and not frozen.
  bool ActingAt(Micros t) const {
    return !deposed && !Frozen(t) &&
           (election.LeadingAt(clock.LocalAt(t)) ||
            election.LeadingAt(clock.LocalAt(t - kActionTime)));
  }

  Link link;
  SkewedClock clock;
  Wire wire;
  SimElectionBackend backend;
  controller::LeaderElection election;
  controller::ServingLeaseStartRule rule;
  Micros next_step = 0;     // true time
  Micros election_due = 0;  // true time of the election's next step
  Windows freezes;
  std::optional<int64_t> token;
  bool deposed = false;
  bool replacing = false;  // decided the share's pod is to be replaced
};

// What the leader reads before a replacement: the share's record and the
// two keys ServingLeaseGate reads, at one revision, with the recorded
// lease's TTL when the gate asks for it.
struct LeaderRead {
  controller::ServingLeaseKeys keys;
  uint64_t epoch = 0;
  int64_t revision = 0;
};

// The leader's pass over the share at its clock's now.
void Reconcile(Replica& r, Volume& volume, Outcome& outcome) {
  EtcdModel& etcd = volume.etcd;
  const Micros t = r.clock.at();
  if (!r.replacing) {
    // It replaces a pod that is gone, one it cannot reach (its node cut off
    // or frozen, as far as it can tell), and now and then a healthy one (a
    // health check that lied).
    const ShareManager* newest = volume.Newest();
    const bool gone = newest->stopped || newest->lost;
    const bool unreachable = newest->Frozen(t) || newest->link.Cut(t);
    if (!gone && !(unreachable && volume.Chance(0.2)) && !volume.Chance(0.002)) return;
    r.replacing = true;
  }
  const Duration call = etcd::LeaseCallTimeout(Duration(volume.ttl / kMs));
  auto read = r.wire.Call<LeaderRead>(r.clock.Now() + call, [&] {
    LeaderRead seen{.epoch = etcd.record_epoch, .revision = etcd.record_revision};
    if (etcd.key) seen.keys.holder = absl::StrCat(etcd::PaddedEpoch(etcd.key->epoch), " pod");
    if (etcd.recorded_epoch) {
      seen.keys.recorded = etcd::EpochRecord(etcd.recorded_epoch, etcd.recorded_lease);
    }
    if (const auto lease = controller::RecordedLeaseToAsk(seen.keys)) {
      seen.keys.recorded_lease_ttl = etcd.TimeToLive(*lease);
    }
    return seen;
  });
  if (!read.ok()) return;
  const uint64_t epoch = read->epoch + 1;
  const controller::StartCheck check = r.rule.Check(kVolume, epoch, read->keys, r.clock.Now());
  if (!check.ready) {
    r.next_step = r.clock.TrueAt(r.clock.Now() + Duration(check.retry_after_ms));
    return;
  }
  // Stalled between its decision and its write now and then (a GC pause, a
  // SIGSTOP): the write may reach etcd after another replica won.
  if (volume.Chance(0.05)) r.clock.MoveTo(t + volume.Uniform(0, 2 * volume.ttl));
  auto written = r.wire.Call<EtcdModel::Written>(r.clock.Now() + call, [&] {
    return etcd.Update(controller::LeaderWriteGuard(kPrefix, *r.token), read->revision, epoch);
  });
  if (!written.ok() || *written == EtcdModel::Written::kConflict) return;  // read again
  if (*written == EtcdModel::Written::kNotLeader) {
    ++outcome.writes_refused;
    r.deposed = true;
    return;
  }
  if (!r.election.LeadingAt(r.clock.Now())) {  // LeaderGatedRuntime refuses the Create
    r.deposed = true;
    return;
  }
  volume.DeleteOlder(r.clock.at(), epoch, 0.7);
  volume.StartPod(r.clock.at(), epoch);
  r.replacing = false;
}

// Never two replicas acting at the same instant.
void RequireOneLeader(const std::vector<std::unique_ptr<Replica>>& replicas, Micros t, Micros ttl) {
  int acting = 0;
  std::string who;
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (replicas[i]->ActingAt(t)) {
      ++acting;
      who += " r" + std::to_string(i) + " (token " + std::to_string(*replicas[i]->token) + ")";
    }
  }
  REQUIRE_MESSAGE(acting <= 1, "two leaders acting at t=", t, " us:", who, " (leader TTL ",
                  ttl / kSec, " s)");
}

// Three replicas elect a leader among them; only the leader replaces the
// share's pod, when the real start rule lets it. Replicas are frozen, cut
// off, their messages delayed and lost, their clocks skewed; a deposed one
// restarts a while later. After every step: never two leaders acting, never
// two share-managers serving; etcd's model refuses a write of any term but
// the newest. With the faults over: a leader acts, the newest epoch serves.
Outcome RunElectionSeed(uint64_t seed) {
  INFO("replay: SHARE_SIM_SEED=", seed,
       " ./build/tests/sharemgr_unit_tests -tc='*leader election simulation*'");
  std::mt19937_64 rng(seed);
  auto uniform = [&](Micros lo, Micros hi) {
    return std::uniform_int_distribution<Micros>(lo, hi)(rng);
  };
  const Micros pod_ttl = uniform(2, 10) * kSec;
  const Micros leader_ttl = uniform(2, 10) * kSec;
  EtcdModel etcd;
  etcd.revoke_delay = uniform(0, 500) * kMs;
  const Micros faults_end = 10 * 60 * kSec;
  const Micros end = faults_end + 6 * std::max(pod_ttl, leader_ttl) + 30 * kSec;
  Volume volume(etcd, rng, pod_ttl, faults_end);
  Outcome& outcome = volume.outcome;
  // The share's first pod (no epoch recorded yet: it starts at once).
  volume.StartPod(0, 1);

  std::vector<std::unique_ptr<Replica>> replicas(3);
  auto start_replica = [&](size_t i, Micros at) {
    auto& r = replicas[i];
    r = std::make_unique<Replica>(etcd, rng, at, absl::StrCat("r", i), leader_ttl, pod_ttl,
                                  std::uniform_real_distribution<>(-0.01, 0.01)(rng));
    r->election_due = at;
    if (at < faults_end) {
      r->link.loss = volume.Chance(0.3) ? 0.2 : 0.01;
      r->link.stall_chance = 0.02;
      r->link.faults_end = faults_end;
      for (int k = 0; k < 2; ++k) {
        if (volume.Chance(0.4)) r->link.cuts.push_back(volume.FaultWindow(at));
        if (volume.Chance(0.3)) r->freezes.push_back(volume.FaultWindow(at));
      }
    }
  };
  for (size_t i = 0; i < replicas.size(); ++i) start_replica(i, uniform(0, 2 * kSec));

  for (;;) {
    ShareManager* pod = volume.Due();
    Replica* replica = nullptr;
    size_t index = 0;
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (replica == nullptr || replicas[i]->next_step < replica->next_step) {
        replica = replicas[i].get();
        index = i;
      }
    }
    if (pod != nullptr && pod->next_step <= replica->next_step) {
      if (pod->next_step >= end) break;
      volume.Step(*pod);
      RequireOneLeader(replicas, pod->clock.at(), leader_ttl);
      continue;
    }
    if (replica->next_step >= end) break;
    Replica& r = *replica;
    const Micros at = ThawedAt(r.freezes, r.next_step);
    if (at != r.next_step) {
      r.next_step = at;
      continue;
    }
    r.clock.MoveTo(at);
    if (r.deposed) {  // exited: restarted a while later, a new process
      start_replica(index, at + uniform(1, 5) * kSec);
      replicas[index]->next_step = replicas[index]->election_due;
      continue;
    }
    if (at >= r.election_due) {
      const bool had_token = r.token.has_value();
      const TimePoint next = r.election.Step();
      if (r.token && !had_token) ++outcome.terms;
      r.election_due = next == TimePoint::max() ? std::numeric_limits<Micros>::max()
                                                : std::max(r.clock.TrueAt(next), r.clock.at());
    }
    r.next_step = r.election_due;
    if (!r.deposed && r.election.LeadingAt(r.clock.Now())) {
      r.next_step = std::min(r.election_due, r.clock.at() + 200 * kMs);  // the resync
      Reconcile(r, volume, outcome);
      r.next_step = std::max(r.next_step, r.clock.at());
    }
    if (r.deposed) r.next_step = r.clock.at();  // exits at once
    RequireOneLeader(replicas, r.clock.at(), leader_ttl);
    volume.RequireOneServing(r.clock.at());
  }
  bool acting = false;
  for (const auto& r : replicas) acting = acting || r->ActingAt(end - 1);
  CHECK_MESSAGE(acting, "no leader at the end (leader TTL ", leader_ttl / kSec, " s)");
  outcome.last_serving_epoch = volume.ServingEpochAt(end - 1);
  const uint64_t newest = volume.Newest()->epoch;
  CHECK_MESSAGE(outcome.last_serving_epoch == newest, "newest epoch ", newest,
                " is not serving at the end (pod TTL ", pod_ttl / kSec, " s)");
  return outcome;
}

struct QuietLogs {
  QuietLogs() : level(spdlog::get_level()) {
    spdlog::set_level(std::getenv("SIM_LOGS") ? spdlog::level::debug : spdlog::level::off);
  }
  ~QuietLogs() { spdlog::set_level(level); }
  spdlog::level::level_enum level;
};

}  // namespace

TEST_CASE("serving lease simulation: never two share-managers serving one volume, seeded") {
  QuietLogs quiet;
  if (const char* replay = std::getenv("SHARE_SIM_SEED")) {
    RunSeed(std::strtoull(replay, nullptr, 10));
    return;
  }
  int started = 0, served = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Outcome o = RunSeed(seed);
    started += o.epochs_started;
    served += o.epochs_served;
  }
  // The run is no vacuous pass: many epochs took the lease in turn.
  MESSAGE(started, " epochs started, ", served, " took the lease");
  CHECK(served >= 200);
}

TEST_CASE(
    "leader election simulation: never two leaders acting, a deposed leader's write refused, "
    "never two share-managers serving, seeded") {
  QuietLogs quiet;
  if (const char* replay = std::getenv("SHARE_SIM_SEED")) {
    RunElectionSeed(std::strtoull(replay, nullptr, 10));
    return;
  }
  int terms = 0, refused = 0, started = 0, served = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const Outcome o = RunElectionSeed(seed);
    terms += o.terms;
    refused += o.writes_refused;
    started += o.epochs_started;
    served += o.epochs_served;
  }
  // No vacuous pass: leadership changed hands often, deposed leaders did
  // write late, and many epochs were started by leaders and took the lease.
  MESSAGE(terms, " terms won, ", refused, " writes refused to a deposed leader, ", started,
          " epochs started, ", served, " took the lease");
  CHECK(terms >= 200);
  CHECK(refused >= 1);
  CHECK(served >= 100);
}

}  // namespace sharemgr
