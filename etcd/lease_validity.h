// How long a lease held in etcd may be counted on, on the holder's own
// monotonic clock. The share-manager's serving lease (sharemgr/serving_lease.h)
// and the controller's leadership (controller/ha/leader_election.h) keep their
// leases by these same rules, so each stops acting before etcd can let anyone
// else in (docs/DESIGN-NOTES.md "Serving lease", "Highly available share-controller"):
//
//   valid_until = (send time of the last confirmed grant or renewal)
//                 + min(TTL, TTL etcd granted) - fence margin
//
// A renewal answered TTL <= 0 (etcd let the lease expire), or one that finds
// the lease's key gone or someone else's, ends it at once; so does a grant or
// renewal confirmed only after valid_until (never acted on).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/clock.h"

namespace etcd {

// The TTL as etcd takes it: whole seconds.
int64_t TtlSeconds(base::Duration ttl);

// The TTLs a lease flag takes (--lease-ttl, --leader-ttl, --pod-lease-ttl).
inline constexpr base::Duration kMinLeaseTtl{2'000};    // etcd's shortest with its defaults
inline constexpr base::Duration kMaxLeaseTtl{300'000};  // 5 min
// A TTL between kMinLeaseTtl and kMaxLeaseTtl in whole seconds, else
// InvalidArgument naming `flag` and that range.
absl::Status ValidateLeaseTtl(absl::string_view flag, base::Duration ttl);

// The derived timings, from the TTL.
base::Duration LeaseFenceMargin(base::Duration ttl);    // max(500ms, TTL/5)
base::Duration LeaseRenewInterval(base::Duration ttl);  // TTL/3
// The bound of one call to one etcd member (a renewal, a step of an attempt,
// a revoke, a slice of waiting): a hung member costs this much before the
// next one is tried. Stopping waits for the call in flight, up to this per
// member it tries. Acting never depends on a call returning: the holder stops
// on its own timer at valid_until.
base::Duration LeaseCallTimeout(base::Duration ttl);  // TTL/6, within [250ms, 2s]
// The pause before a failed call is tried again.
base::Duration LeaseRetryPause(base::Duration ttl);  // TTL/20, within [50ms, 500ms]
// What a successor waits after the old holder's key is gone:
// max(500ms, TTL/50), i.e. a 1% clock-rate error on each side.
base::Duration DefaultLeaseDriftMargin(base::Duration ttl);

// What one keep-alive of a held lease found.
struct LeaseRenewal {
  // etcd's answer: the lease's TTL after the renewal; <= 0 means it expired.
  int64_t ttl_seconds = 0;
  // What the key held with the lease holds now (a key deleted by hand is not
  // noticed by the lease itself).
  enum class Key { kOurs, kGone, kOther };
  Key key = Key::kOurs;
  // kOther: whose the key is now, as the loss is to name it ("epoch 6").
  std::string other;
};

// The validity of one held lease. Not thread-safe: its keeper guards it.
class LeaseValidity {
 public:
  explicit LeaseValidity(base::Duration ttl) : ttl_(ttl) {}

  // The lease was granted (or taken) by a request sent at `sent` and answered
  // at `answered`: nullopt when it may be counted on, else why it is lost (the
  // answer came after the validity it gave had ended: a replacement may have
  // been let in meanwhile).
  std::optional<std::string> Taken(base::TimePoint sent, base::TimePoint answered,
                                   int64_t granted_ttl_seconds);

  base::TimePoint valid_until() const { return valid_until_; }
  // When the keeper is due next: the next renewal, or the end of validity.
  base::TimePoint NextStep() const;
  bool RenewalDue(base::TimePoint now) const { return now >= next_renewal_; }
  // The deadline of a keep-alive sent at `now`: an answer after valid_until
  // would come too late anyway.
  base::TimePoint KeepAliveDeadline(base::TimePoint now) const;

  // Why the lease is lost at `now` because its validity ended; nullopt
  // while it lasts.
  std::optional<std::string> Ended(base::TimePoint now) const;
  // A keep-alive sent at `sent` was answered at `answered` with `renewal`:
  // nullopt when it renewed the lease (valid_until moved), else why the lease
  // is lost.
  std::optional<std::string> Renewed(base::TimePoint sent, base::TimePoint answered,
                                     const LeaseRenewal& renewal);
  // A keep-alive failed at `at` with `error`: tried again after the retry
  // pause; the error is named when the lease ends.
  void RenewalFailed(base::TimePoint at, std::string error);

 private:
  // A lease granted `granted_ttl_seconds` by a request sent at `sent`.
  void ValidFrom(base::TimePoint sent, int64_t granted_ttl_seconds);

  base::Duration ttl_;
  base::TimePoint valid_until_{};
  base::TimePoint next_renewal_{};
  std::string last_error_;  // of the keep-alives since the last confirmed one
};

}  // namespace etcd
