// Leader election among share-controller replicas (issue #12, docs/DESIGN-NOTES.md "Highly
// available share-controller"): exactly one leads, on a lease in a store with
// leases (etcd: controller/ha/etcd_election.h), and knows on its own monotonic
// clock until when it may act.
//
// The keeper campaigns (takes the election key with a fresh lease, if nobody
// holds it); lost, it follows: waits until the key is gone (the leader
// resigned, or etcd expired its lease) and so is the leader's etcd lease,
// then campaigns again. Won, it hands
// out the fencing token (the key's create_revision: every store write of the
// leader compares it, see EtcdStore::SetWriteGuard), renews every TTL/3 and
// counts valid_until by the serving lease's rules (etcd/lease_validity.h).
// Leadership lost (valid_until passed, a renewal answered TTL <= 0, the key
// gone or someone else's) is final: the replica stops acting and exits.
//
// The store sits behind ElectionBackend, so the timing is tested with a fake
// clock and a fake backend.
#pragma once

#include <signal.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "base/log_limiter.h"
#include "etcd/lease_keeper.h"
#include "etcd/lease_validity.h"

namespace controller {

// The store that holds the election. Every call returns by its deadline (a
// point on the keeper's monotonic clock), with an error when it could not
// finish.
class ElectionBackend {
 public:
  virtual ~ElectionBackend() = default;

  struct Campaign {
    bool won = false;
    // Won: the fencing token (the election key's create_revision) and the
    // TTL the store granted (it may round a short one up).
    int64_t token = 0;
    int64_t granted_ttl_seconds = 0;
    // Lost: who leads (the key's value).
    std::string leader;
  };
  // Grants a lease of `ttl_seconds` and takes the election key with it,
  // atomically, if nobody holds the key.
  virtual absl::StatusOr<Campaign> TryLead(int64_t ttl_seconds, base::TimePoint deadline) = 0;
  // After a lost campaign: true once the key is gone, false at the deadline.
  virtual absl::StatusOr<bool> WaitVacant(base::TimePoint deadline) = 0;
  // One keep-alive of the lease won, and what the key holds now.
  virtual absl::StatusOr<etcd::LeaseRenewal> KeepAlive(base::TimePoint deadline) = 0;
  // Gives the leadership up (the key goes with the lease). OK when none.
  virtual absl::Status Resign(base::TimePoint deadline) = 0;
};

struct LeaderElectionOptions {
  // This replica, as the election key names the leader (unique per replica).
  std::string id;
  base::Duration ttl{5000};
};

class LeaderElection final : public etcd::LeaseKeeper {
 public:
  struct Hooks {
    // Leading now, with the fencing token. Keeper thread, at most once.
    std::function<void(int64_t token)> elected;
    // Leadership lost, for good: stop acting at once. Keeper thread, at most
    // once: after `elected`, or instead of it when a won campaign was
    // confirmed only after the validity it gave had ended (never acted on).
    std::function<void(const std::string& why)> deposed;
  };
  enum class StopMode {
    kResign,     // a clean stop, after acting ended: a follower need not wait the TTL
    kLetExpire,  // leave the lease to expire by itself
  };

  LeaderElection(ElectionBackend& backend, const base::TimeSource& clock,
                 LeaderElectionOptions options, Hooks hooks);
  // Stop(kLetExpire) unless stopped already.
  ~LeaderElection() override;

  // Start() (campaign, follow, lead), valid_until() (unset while not
  // leading) and Step(): see etcd::LeaseKeeper.

  // Ends the keeper thread (after the store call in flight, bounded by
  // etcd::LeaseCallTimeout), then with kResign resigns if it was elected.
  // Call only once acting has ended. Returns the resignation's outcome.
  absl::Status Stop(StopMode mode);

  // Any thread. This replica may act at `now` (the keeper's clock) only if it
  // leads and now < valid_until. Check it right before each action.
  bool LeadingAt(base::TimePoint now) const { return ValidAt(now); }
  // The fencing token; unset before elected.
  std::optional<int64_t> token() const;
  const LeaderElectionOptions& options() const { return options_; }

 private:
  base::TimePoint StepTaking(base::TimePoint now) override;
  absl::StatusOr<etcd::LeaseRenewal> KeepAlive(base::TimePoint deadline) override;
  void OnLost(const std::string& why) override;
  base::TimePoint StepCampaign(base::TimePoint now);
  base::TimePoint StepFollow(base::TimePoint now);

  ElectionBackend& backend_;
  const LeaderElectionOptions options_;
  const Hooks hooks_;

  std::optional<int64_t> token_ ABSL_GUARDED_BY(mu_);
  // Step state: only the stepping thread (the keeper's, or a test's) touches
  // these, but under mu_ all the same so no annotation needs an exception.
  bool following_ ABSL_GUARDED_BY(mu_) = false;
  base::TimePoint not_before_ ABSL_GUARDED_BY(mu_){};
  std::string leader_seen_ ABSL_GUARDED_BY(mu_);  // logged once per change
  // A follower retries every TTL/20 while etcd is out of reach: one line
  // every 10 s says so.
  base::LogLimiter failure_log_{base::Duration(10'000)};
};

// Blocks until `done` (polled every 100 ms) is true, or one of `signals`
// (blocked in every thread) arrives: false, and *sig is it.
bool AwaitUnlessSignalled(const std::function<bool()>& done, const sigset_t& signals, int* sig);

}  // namespace controller
