#include "etcd/lease_validity.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace etcd {
namespace {

using base::Duration;
using base::TimePoint;

Duration Clamp(Duration d, Duration low, Duration high) { return std::clamp(d, low, high); }

Duration Between(TimePoint from, TimePoint to) {
  return std::chrono::duration_cast<Duration>(to - from);
}

}  // namespace

int64_t TtlSeconds(Duration ttl) {
  return std::chrono::duration_cast<std::chrono::seconds>(ttl).count();
}

absl::Status ValidateLeaseTtl(absl::string_view flag, Duration ttl) {
  if (ttl >= kMinLeaseTtl && ttl <= kMaxLeaseTtl && ttl.count() % 1000 == 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " must be whole seconds (etcd counts its leases in seconds) between ",
      base::FormatDuration(kMinLeaseTtl), " and ", base::FormatDuration(kMaxLeaseTtl)));
}

Duration LeaseFenceMargin(Duration ttl) { return std::max(Duration(500), ttl / 5); }
Duration LeaseRenewInterval(Duration ttl) { return ttl / 3; }
Duration LeaseCallTimeout(Duration ttl) { return Clamp(ttl / 6, Duration(250), Duration(2000)); }
Duration LeaseRetryPause(Duration ttl) { return Clamp(ttl / 20, Duration(50), Duration(500)); }
Duration DefaultLeaseDriftMargin(Duration ttl) { return std::max(Duration(500), ttl / 50); }

void LeaseValidity::ValidFrom(TimePoint sent, int64_t granted_ttl_seconds) {
  // etcd may round a short TTL up; never count on more than was asked.
  const Duration granted =
      std::min(ttl_, Duration(std::chrono::seconds(std::max<int64_t>(granted_ttl_seconds, 0))));
  // Sent at `sent`: etcd granted or renewed it no earlier, so it lasts at
  // least until sent + granted on etcd's clock.
  valid_until_ = sent + granted - LeaseFenceMargin(ttl_);
  next_renewal_ = sent + LeaseRenewInterval(ttl_);
  last_error_.clear();
}

std::optional<std::string> LeaseValidity::Taken(TimePoint sent, TimePoint answered,
                                                int64_t granted_ttl_seconds) {
  ValidFrom(sent, granted_ttl_seconds);
  if (answered < valid_until_) return std::nullopt;
  return absl::StrCat("taken, but confirmed only after its validity ended (",
                      base::FormatDuration(Between(sent, answered)), " after it was asked for)");
}

TimePoint LeaseValidity::NextStep() const { return std::min(next_renewal_, valid_until_); }

TimePoint LeaseValidity::KeepAliveDeadline(TimePoint now) const {
  return std::min(now + LeaseCallTimeout(ttl_), valid_until_);
}

std::optional<std::string> LeaseValidity::Ended(TimePoint now) const {
  if (now < valid_until_) return std::nullopt;
  // valid_until = last confirmed send + TTL - fence margin.
  const Duration confirmed_ago = Between(valid_until_, now) + ttl_ - LeaseFenceMargin(ttl_);
  return absl::StrCat("no renewal confirmed for ", base::FormatDuration(confirmed_ago), " (TTL ",
                      base::FormatDuration(ttl_), ")",
                      last_error_.empty() ? "" : "; last error: ", last_error_);
}

std::optional<std::string> LeaseValidity::Renewed(TimePoint sent, TimePoint answered,
                                                  const LeaseRenewal& renewal) {
  if (renewal.ttl_seconds <= 0) {
    return absl::StrCat("the store says the lease expired (renewal answered TTL ",
                        renewal.ttl_seconds, ")");
  }
  if (renewal.key == LeaseRenewal::Key::kGone) return "the lease key was deleted";
  if (renewal.key == LeaseRenewal::Key::kOther) {
    return absl::StrCat("the lease key holds ", renewal.other, " now");
  }
  // Strict: confirmed after valid_until is not confirmed (the holder may
  // have stopped acting already on its own timer).
  if (answered >= valid_until_) {
    return absl::StrCat("a renewal was confirmed only after the lease's validity ended (",
                        base::FormatDuration(Between(sent, answered)), " after it was sent)");
  }
  ValidFrom(sent, renewal.ttl_seconds);
  return std::nullopt;
}

void LeaseValidity::RenewalFailed(TimePoint at, std::string error) {
  last_error_ = std::move(error);
  next_renewal_ = at + LeaseRetryPause(ttl_);
}

}  // namespace etcd
