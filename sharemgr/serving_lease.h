// The serving lease (issue #12): the right to export this volume under this
// epoch, held in a store with leases (etcd) and renewed against this
// process's own monotonic clock, so a share-manager cut off from the store
// stops serving before the store lets a replacement in.
//
// The keeper takes the lease (never before it is held does the daemon serve),
// waits out an older holder (until its key is gone, then the drift margin),
// refuses for ever when a newer epoch was recorded, renews every TTL/3, and
// reports the lease lost when
//  - its monotonic clock passes valid_until = (send time of the last
//    confirmed renewal) + TTL - fence margin, or
//  - a renewal answers TTL <= 0 (the store let it expire), or
//  - the lease key is gone or holds another epoch.
// Lost is final: the keeper never takes the lease again under this epoch.
//
// The store sits behind LeaseBackend (etcd: sharemgr/etcd_lease_backend.h),
// so the timing is tested with a fake clock and a fake backend.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "etcd/lease_keeper.h"
#include "etcd/lease_validity.h"

namespace sharemgr {

// The store that holds the lease. Every call returns by its deadline (a point
// on the keeper's monotonic clock), with an error when it could not finish.
class LeaseBackend {
 public:
  virtual ~LeaseBackend() = default;

  struct Attempt {
    enum class Outcome {
      kTaken,        // the lease is ours now
      kHeldByOther,  // an older epoch's holder still has the key
      kSuperseded,   // an epoch >= ours was recorded: never ours
    };
    Outcome outcome = Outcome::kTaken;
    // kTaken: the TTL the store granted (it may round a short one up).
    int64_t granted_ttl_seconds = 0;
    // kHeldByOther: the holder's epoch and name; kSuperseded: the recorded epoch.
    uint64_t other_epoch = 0;
    std::string other_holder;
  };
  // Grants a lease of `ttl_seconds` and takes the key with it, atomically,
  // if nobody holds the key and no epoch >= ours was ever recorded.
  virtual absl::StatusOr<Attempt> TryAcquire(int64_t ttl_seconds, base::TimePoint deadline) = 0;
  // After kHeldByOther: true once the key is gone, false at the deadline.
  virtual absl::StatusOr<bool> WaitReleased(base::TimePoint deadline) = 0;

  struct Renewal {
    // The store's answer: the lease's TTL after the renewal; <= 0 means it
    // expired.
    int64_t ttl_seconds = 0;
    using Key = etcd::LeaseRenewal::Key;
    Key key = Key::kOurs;
    uint64_t key_epoch = 0;  // kOther: the epoch the key holds now
  };
  // One keep-alive of the lease taken, and what its key holds now.
  virtual absl::StatusOr<Renewal> KeepAlive(base::TimePoint deadline) = 0;
  // Gives the lease up (its key goes with it). OK when there is none.
  virtual absl::Status Revoke(base::TimePoint deadline) = 0;
};

struct ServingLeaseOptions {
  uint64_t epoch = 0;
  base::Duration ttl{10'000};
  // Waited after an older holder's key is gone, before taking it: covers the
  // clock-rate difference between the old holder's clock and the store's (see
  // docs/DESIGN-NOTES.md "Serving lease").
  base::Duration drift_margin{500};
  // Taking the lease (waiting out an older holder included) gives up after this.
  base::Duration acquire_timeout{30'000};
};

// The derived timings, from the TTL (etcd/lease_validity.h: the
// controller's leadership keeps its lease by the same rules).
using etcd::DefaultLeaseDriftMargin;
using etcd::LeaseCallTimeout;
using etcd::LeaseFenceMargin;
using etcd::LeaseRenewInterval;
using etcd::LeaseRetryPause;

// The keeper of the serving lease; its thread, renewals and validity are
// etcd::LeaseKeeper's (shared with the controller's leadership).
class ServingLease final : public etcd::LeaseKeeper {
 public:
  struct Hooks {
    // The lease is held: serving may start. Keeper thread, at most once.
    std::function<void()> taken;
    // The lease is lost, or could not be taken (superseded, timed out):
    // serving must stop at once, for good. Keeper thread, at most once.
    std::function<void(const std::string& why)> lost;
    // A renewal was confirmed: valid until `valid_until` (the keeper's
    // clock) now. Keeper thread, after `taken`, before the renewal is logged.
    std::function<void(base::TimePoint valid_until)> renewed;
  };
  enum class StopMode {
    kRevoke,     // a clean stop, after serving ended: the replacement need not wait the TTL
    kLetExpire,  // leave the lease to expire by itself
  };

  ServingLease(LeaseBackend& backend, const base::TimeSource& clock, ServingLeaseOptions options,
               Hooks hooks);
  // Stop(kLetExpire) unless stopped already.
  ~ServingLease() override;

  // Start(), ValidAt(now) (serving is allowed at `now`, the keeper's clock,
  // only if the lease is held and now < valid_until), valid_until() and
  // Step(): see etcd::LeaseKeeper.

  // Ends the keeper thread (after the store call in flight, bounded by
  // LeaseCallTimeout per member tried), then with kRevoke revokes the lease if it was ever
  // taken. Call only once serving has ended. Returns the revoke's outcome.
  absl::Status Stop(StopMode mode);

  const ServingLeaseOptions& options() const { return options_; }

 private:
  base::TimePoint StepTaking(base::TimePoint now) override;
  absl::StatusOr<etcd::LeaseRenewal> KeepAlive(base::TimePoint deadline) override;
  void OnLost(const std::string& why) override;
  void OnRenewed(base::TimePoint valid_until) override;
  base::TimePoint StepAcquire(base::TimePoint now);
  base::TimePoint StepWaitForRelease(base::TimePoint now);

  LeaseBackend& backend_;
  const ServingLeaseOptions options_;
  const Hooks hooks_;

  // Step state: only the stepping thread (the keeper's, or a test's) touches
  // these, but under mu_ all the same so no annotation needs an exception.
  bool waiting_for_release_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<base::TimePoint> acquire_deadline_ ABSL_GUARDED_BY(mu_);
  base::TimePoint not_before_ ABSL_GUARDED_BY(mu_){};
  std::string last_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sharemgr
