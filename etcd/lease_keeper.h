// What every keeper of an etcd lease shares (the share-manager's serving
// lease, sharemgr/serving_lease.h; the controller's leadership,
// controller/ha/leader_election.h): a thread that steps the keeper on its own
// monotonic clock, the held lease's validity (LeaseValidity) renewed every
// TTL/3, and the loss, which is final. What comes before the lease is held
// (taking it, waiting out another holder) is the subclass's StepTaking.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "etcd/lease_validity.h"

namespace etcd {

class LeaseKeeper {
 public:
  // The subclass's destructor must have ended the thread (EndThread): the
  // thread calls the subclass.
  virtual ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Starts the keeper thread: take, then renew.
  void Start();

  // Any thread. The lease may be counted on at `now` (the keeper's clock)
  // only if it is held and now < valid_until.
  bool ValidAt(base::TimePoint now) const;
  // Unset while not held.
  std::optional<base::TimePoint> valid_until() const;

  // One step of the keeper: does what is due at the clock's now (one store
  // call at most) and returns when the next step is due (TimePoint::max()
  // once lost). The keeper thread loops on it; tests call it on a fake clock.
  base::TimePoint Step();

 protected:
  static constexpr base::TimePoint kNever = base::TimePoint::max();

  // `kind` and `whose` name the lease in logs: "serving lease" "of epoch 5".
  LeaseKeeper(const base::TimeSource& clock, base::Duration ttl, std::string kind,
              std::string whose);

  // A step while the lease is not held yet; returns when the next is due.
  virtual base::TimePoint StepTaking(base::TimePoint now) = 0;
  // One keep-alive of the lease held, and what its key holds now.
  virtual absl::StatusOr<LeaseRenewal> KeepAlive(base::TimePoint deadline) = 0;
  // The lease is lost (or could not be taken): keeper thread, once, outside mu_.
  virtual void OnLost(const std::string& why) = 0;
  // A renewal was confirmed: the lease is valid until `valid_until` now.
  // Keeper thread, outside mu_, before the renewal is logged.
  virtual void OnRenewed(base::TimePoint valid_until) { (void)valid_until; }

  // For StepTaking: the lease was taken by a request sent at `sent` and
  // answered at `answered`. When the next step is due; nullopt when there is
  // nothing to tell (return kNever): stopping (nobody is left to use it), or
  // the answer came after the validity it gave had ended (lost: OnLost was
  // called; the lease counts as held once, so a clean stop gives it up).
  std::optional<base::TimePoint> Held(base::TimePoint sent, base::TimePoint answered,
                                      int64_t granted_ttl_seconds) ABSL_LOCKS_EXCLUDED(mu_);
  // Records the loss (final), logs it and calls OnLost; kNever.
  base::TimePoint Lose(std::string why) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the thread (after the store call in flight). Whether the lease was
  // ever held (the subclass may then give it up); false when ended already.
  bool EndThread() ABSL_LOCKS_EXCLUDED(mu_);

  const base::TimeSource& clock_;
  const base::Duration ttl_;
  const std::string kind_, whose_;
  // Guards this class's state and the subclass's step state.
  mutable absl::Mutex mu_;

 private:
  enum class Phase { kTaking, kHeld, kLost, kStopped };

  base::TimePoint StepRenew(base::TimePoint now);
  void ThreadMain();

  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kTaking;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool ever_held_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<LeaseValidity> held_ ABSL_GUARDED_BY(mu_);  // set while held
  std::thread thread_;  // started by Start(); joined by EndThread()
};

}  // namespace etcd
