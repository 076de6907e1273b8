#include "sharemgr/serving_lease.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/fmt_absl.h"

namespace sharemgr {

using base::Duration;
using base::TimePoint;

ServingLease::ServingLease(LeaseBackend& backend, const base::TimeSource& clock,
                           ServingLeaseOptions options, Hooks hooks)
    : LeaseKeeper(clock, options.ttl, "serving lease", absl::StrCat("of epoch ", options.epoch)),
      backend_(backend),
      options_(options),
      hooks_(std::move(hooks)) {}

ServingLease::~ServingLease() { Stop(StopMode::kLetExpire).IgnoreError(); }

absl::Status ServingLease::Stop(StopMode mode) {
  const bool taken = EndThread();
  if (mode != StopMode::kRevoke || !taken) return absl::OkStatus();
  auto status = backend_.Revoke(clock_.Now() + LeaseCallTimeout(options_.ttl));
  if (status.ok()) {
    spdlog::info("serving lease of epoch {} revoked", options_.epoch);
  } else {
    spdlog::warn("revoking the serving lease of epoch {}: {} (it expires within {})",
                 options_.epoch, status.message(), base::FormatDuration(options_.ttl));
  }
  return status;
}

TimePoint ServingLease::StepTaking(TimePoint now) {
  bool waiting = false;
  {
    absl::MutexLock lock(&mu_);
    // The acquire budget runs from the first step.
    if (!acquire_deadline_) acquire_deadline_ = now + options_.acquire_timeout;
    waiting = waiting_for_release_;
  }
  return waiting ? StepWaitForRelease(now) : StepAcquire(now);
}

absl::StatusOr<etcd::LeaseRenewal> ServingLease::KeepAlive(TimePoint deadline) {
  auto renewal = backend_.KeepAlive(deadline);
  if (!renewal.ok()) return renewal.status();
  return etcd::LeaseRenewal{.ttl_seconds = renewal->ttl_seconds,
                            .key = renewal->key,
                            .other = absl::StrCat("epoch ", renewal->key_epoch)};
}

void ServingLease::OnLost(const std::string& why) {
  if (hooks_.lost) hooks_.lost(why);
}

void ServingLease::OnRenewed(TimePoint valid_until) {
  if (hooks_.renewed) hooks_.renewed(valid_until);
}

TimePoint ServingLease::StepAcquire(TimePoint now) {
  TimePoint deadline;
  std::string last_error;
  {
    absl::MutexLock lock(&mu_);
    if (now < not_before_) return not_before_;
    deadline = std::min(now + LeaseCallTimeout(options_.ttl), *acquire_deadline_);
    last_error = last_error_;
  }
  if (now >= deadline) {
    return Lose(absl::StrCat("could not take the serving lease of epoch ", options_.epoch,
                             " within ", base::FormatDuration(options_.acquire_timeout),
                             last_error.empty() ? "" : " (last: ", last_error,
                             last_error.empty() ? "" : ")"));
  }
  auto attempt = backend_.TryAcquire(etcd::TtlSeconds(options_.ttl), deadline);
  const TimePoint after = clock_.Now();
  if (!attempt.ok()) {
    spdlog::warn("taking the serving lease of epoch {}: {}", options_.epoch,
                 attempt.status().message());
    absl::MutexLock lock(&mu_);
    last_error_ = std::string(attempt.status().message());
    not_before_ = after + LeaseRetryPause(options_.ttl);
    return not_before_;
  }
  using Outcome = LeaseBackend::Attempt::Outcome;
  if (attempt->outcome == Outcome::kSuperseded ||
      (attempt->outcome == Outcome::kHeldByOther && attempt->other_epoch >= options_.epoch)) {
    return Lose(absl::StrCat("epoch ", options_.epoch, " superseded by ", attempt->other_epoch,
                             ": a newer share-manager took this volume; never serving under epoch ",
                             options_.epoch));
  }
  if (attempt->outcome == Outcome::kHeldByOther) {
    spdlog::info("serving lease held by epoch {} ({}); waiting until it is released, then {} more",
                 attempt->other_epoch, attempt->other_holder,
                 base::FormatDuration(options_.drift_margin));
    absl::MutexLock lock(&mu_);
    waiting_for_release_ = true;
    last_error_ = absl::StrCat("still held by epoch ", attempt->other_epoch, " (",
                               attempt->other_holder, ")");
    return after;
  }
  {
    absl::MutexLock lock(&mu_);
    last_error_.clear();
  }
  // The lease was granted after `now`: it lasts at least until now + TTL on
  // the store's clock. Confirmed after that validity ended, it is lost, never
  // served (a replacement may have been let in meanwhile).
  const std::optional<TimePoint> next = Held(now, after, attempt->granted_ttl_seconds);
  if (!next) return kNever;  // stopping (nobody is left to serve), or lost
  spdlog::info("serving lease of epoch {} taken (TTL {}, renewed every {})", options_.epoch,
               base::FormatDuration(std::min(
                   options_.ttl, Duration(std::chrono::seconds(attempt->granted_ttl_seconds)))),
               base::FormatDuration(LeaseRenewInterval(options_.ttl)));
  if (hooks_.taken) hooks_.taken();
  return *next;
}

TimePoint ServingLease::StepWaitForRelease(TimePoint now) {
  TimePoint deadline;
  std::string last_error;
  {
    absl::MutexLock lock(&mu_);
    deadline = std::min(now + LeaseCallTimeout(options_.ttl), *acquire_deadline_);
    last_error = last_error_;
  }
  if (now >= deadline) {
    return Lose(absl::StrCat("could not take the serving lease of epoch ", options_.epoch,
                             " within ", base::FormatDuration(options_.acquire_timeout), " (",
                             last_error, ")"));
  }
  auto released = backend_.WaitReleased(deadline);
  const TimePoint after = clock_.Now();
  absl::MutexLock lock(&mu_);
  if (!released.ok()) {
    spdlog::warn("waiting for the serving lease's holder: {}", released.status().message());
    return after + LeaseRetryPause(options_.ttl);
  }
  if (!*released) return after;  // the next slice at once
  // The old holder stops serving by its own clock; the drift margin covers
  // that clock running slower than the store's.
  spdlog::info("serving lease released by its holder; taking it in {}",
               base::FormatDuration(options_.drift_margin));
  waiting_for_release_ = false;
  not_before_ = after + options_.drift_margin;
  return not_before_;
}

}  // namespace sharemgr
