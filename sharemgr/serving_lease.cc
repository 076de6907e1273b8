#include "sharemgr/serving_lease.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/fmt_absl.h"

namespace sharemgr {
namespace {

using base::Duration;
using base::TimePoint;

constexpr TimePoint kNever = TimePoint::max();

Duration Clamp(Duration d, Duration low, Duration high) { return std::clamp(d, low, high); }

int64_t WholeSeconds(Duration d) {
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

}  // namespace

Duration LeaseFenceMargin(Duration ttl) { return std::max(Duration(500), ttl / 5); }
Duration LeaseRenewInterval(Duration ttl) { return ttl / 3; }
Duration LeaseCallTimeout(Duration ttl) { return Clamp(ttl / 6, Duration(250), Duration(2000)); }
Duration LeaseRetryPause(Duration ttl) { return Clamp(ttl / 20, Duration(50), Duration(500)); }
Duration DefaultLeaseDriftMargin(Duration ttl) { return std::max(Duration(500), ttl / 50); }

ServingLease::ServingLease(LeaseBackend& backend, const base::TimeSource& clock,
                           ServingLeaseOptions options, Hooks hooks)
    : backend_(backend), clock_(clock), options_(options), hooks_(std::move(hooks)) {}

ServingLease::~ServingLease() { Stop(StopMode::kLetExpire).IgnoreError(); }

void ServingLease::Start() {
  thread_ = std::thread([this] { ThreadMain(); });
}

void ServingLease::ThreadMain() {
  for (;;) {
    const TimePoint next = Step();
    absl::MutexLock lock(&mu_);
    // Lost is final: nothing is left to do until Stop joins.
    if (stopping_ || next == kNever) return;
    const Duration wait = std::chrono::duration_cast<Duration>(next - clock_.Now());
    if (wait > Duration::zero()) {
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(wait));
    }
    if (stopping_) return;
  }
}

absl::Status ServingLease::Stop(StopMode mode) {
  {
    absl::MutexLock lock(&mu_);
    if (phase_ == Phase::kStopped) return absl::OkStatus();
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  bool revoke = false;
  {
    absl::MutexLock lock(&mu_);
    revoke = mode == StopMode::kRevoke && ever_taken_;
    phase_ = Phase::kStopped;
    valid_until_.reset();
  }
  if (!revoke) return absl::OkStatus();
  auto status = backend_.Revoke(clock_.Now() + LeaseCallTimeout(options_.ttl));
  if (status.ok()) {
    spdlog::info("serving lease of epoch {} revoked", options_.epoch);
  } else {
    spdlog::warn("revoking the serving lease of epoch {}: {} (it expires within {})",
                 options_.epoch, status.message(), base::FormatDuration(options_.ttl));
  }
  return status;
}

bool ServingLease::ValidAt(TimePoint now) const {
  absl::MutexLock lock(&mu_);
  return phase_ == Phase::kHeld && valid_until_ && now < *valid_until_;
}

std::optional<TimePoint> ServingLease::valid_until() const {
  absl::MutexLock lock(&mu_);
  if (phase_ != Phase::kHeld) return std::nullopt;
  return valid_until_;
}

TimePoint ServingLease::Step() {
  const TimePoint now = clock_.Now();
  Phase phase;
  {
    absl::MutexLock lock(&mu_);
    // The acquire budget runs from the first step.
    if (!acquire_deadline_) acquire_deadline_ = now + options_.acquire_timeout;
    phase = phase_;
  }
  switch (phase) {
    case Phase::kAcquiring:
      return StepAcquire(now);
    case Phase::kWaitingForRelease:
      return StepWaitForRelease(now);
    case Phase::kHeld:
      return StepRenew(now);
    case Phase::kLost:
    case Phase::kStopped:
      break;
  }
  return kNever;
}

TimePoint ServingLease::Lose(std::string why) {
  {
    absl::MutexLock lock(&mu_);
    if (phase_ == Phase::kLost || phase_ == Phase::kStopped) return kNever;
    phase_ = Phase::kLost;
    valid_until_.reset();
  }
  spdlog::error("serving lease of epoch {}: {}", options_.epoch, why);
  if (hooks_.lost) hooks_.lost(why);
  return kNever;
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
  auto attempt = backend_.TryAcquire(WholeSeconds(options_.ttl), deadline);
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
    phase_ = Phase::kWaitingForRelease;
    last_error_ = absl::StrCat("still held by epoch ", attempt->other_epoch, " (",
                               attempt->other_holder, ")");
    return after;
  }
  // The store may round a short TTL up; never count on more than was asked.
  const Duration granted =
      std::min(options_.ttl, Duration(std::chrono::seconds(attempt->granted_ttl_seconds)));
  // The lease was granted after `now`: it lasts at least until now + TTL
  // on the store's clock.
  const TimePoint valid_until = now + granted - LeaseFenceMargin(options_.ttl);
  if (after >= valid_until) {
    {
      absl::MutexLock lock(&mu_);
      ever_taken_ = true;  // a clean stop revokes it
    }
    // Taken so late that its validity is over: serving now could overlap a
    // replacement the store let in meanwhile.
    return Lose(
        absl::StrCat("the serving lease of epoch ", options_.epoch,
                     " was confirmed only after its validity ended (",
                     base::FormatDuration(std::chrono::duration_cast<Duration>(after - now)),
                     " after it was asked for)"));
  }
  TimePoint next;
  {
    absl::MutexLock lock(&mu_);
    phase_ = Phase::kHeld;
    ever_taken_ = true;
    last_error_.clear();
    valid_until_ = valid_until;
    next_renewal_ = now + LeaseRenewInterval(options_.ttl);
    next = std::min(next_renewal_, *valid_until_);
    if (stopping_) return kNever;  // nobody is left to serve
  }
  spdlog::info("serving lease of epoch {} taken (TTL {}, renewed every {})", options_.epoch,
               base::FormatDuration(granted),
               base::FormatDuration(LeaseRenewInterval(options_.ttl)));
  if (hooks_.taken) hooks_.taken();
  return next;
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
  phase_ = Phase::kAcquiring;
  not_before_ = after + options_.drift_margin;
  return not_before_;
}

TimePoint ServingLease::StepRenew(TimePoint now) {
  TimePoint valid_until;
  {
    absl::MutexLock lock(&mu_);
    valid_until = *valid_until_;
    if (now < next_renewal_ && now < valid_until) return std::min(next_renewal_, valid_until);
  }
  if (now >= valid_until) {
    // valid_until = last confirmed send + TTL - fence margin.
    const Duration confirmed_ago = std::chrono::duration_cast<Duration>(now - valid_until) +
                                   options_.ttl - LeaseFenceMargin(options_.ttl);
    std::string last_error;
    {
      absl::MutexLock lock(&mu_);
      last_error = last_error_;
    }
    return Lose(absl::StrCat("no renewal confirmed for ", base::FormatDuration(confirmed_ago),
                             " (TTL ", base::FormatDuration(options_.ttl), ")",
                             last_error.empty() ? "" : "; last error: ", last_error));
  }
  // Never past valid_until: an answer after it would come too late anyway.
  auto renewal = backend_.KeepAlive(std::min(now + LeaseCallTimeout(options_.ttl), valid_until));
  const TimePoint after = clock_.Now();
  if (!renewal.ok()) {
    spdlog::warn("renewing the serving lease of epoch {} (valid {} more): {}", options_.epoch,
                 base::FormatDuration(std::chrono::duration_cast<Duration>(valid_until - after)),
                 renewal.status().message());
    absl::MutexLock lock(&mu_);
    last_error_ = std::string(renewal.status().message());
    next_renewal_ = after + LeaseRetryPause(options_.ttl);
    return std::min(next_renewal_, valid_until);
  }
  if (renewal->ttl_seconds <= 0) {
    return Lose(absl::StrCat("the store says the lease expired (renewal answered TTL ",
                             renewal->ttl_seconds, ")"));
  }
  if (renewal->key == LeaseBackend::Renewal::Key::kGone) {
    return Lose("the lease key was deleted");
  }
  if (renewal->key == LeaseBackend::Renewal::Key::kOther) {
    return Lose(absl::StrCat("the lease key holds epoch ", renewal->key_epoch, " now"));
  }
  // Strict: confirmed after valid_until is not confirmed (the daemon may have
  // fenced already on its own timer).
  if (after >= valid_until) {
    return Lose(
        absl::StrCat("a renewal was confirmed only after the lease's validity ended (",
                     base::FormatDuration(std::chrono::duration_cast<Duration>(after - now)),
                     " after it was sent)"));
  }
  const Duration granted =
      std::min(options_.ttl, Duration(std::chrono::seconds(renewal->ttl_seconds)));
  absl::MutexLock lock(&mu_);
  last_error_.clear();
  // Sent at `now`: the store renewed it no earlier, so it lasts at least
  // until now + TTL on the store's clock.
  valid_until_ = now + granted - LeaseFenceMargin(options_.ttl);
  next_renewal_ = now + LeaseRenewInterval(options_.ttl);
  spdlog::debug("serving lease renewed (answered in {}); valid {} more",
                base::FormatDuration(std::chrono::duration_cast<Duration>(after - now)),
                base::FormatDuration(std::chrono::duration_cast<Duration>(*valid_until_ - after)));
  return std::min(next_renewal_, *valid_until_);
}

}  // namespace sharemgr
