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

int64_t WholeSeconds(Duration d) {
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

}  // namespace

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
    held_.reset();
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
  return phase_ == Phase::kHeld && held_ && now < held_->valid_until();
}

std::optional<TimePoint> ServingLease::valid_until() const {
  absl::MutexLock lock(&mu_);
  if (phase_ != Phase::kHeld || !held_) return std::nullopt;
  return held_->valid_until();
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
    held_.reset();
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
  TimePoint next;
  {
    absl::MutexLock lock(&mu_);
    phase_ = Phase::kHeld;
    ever_taken_ = true;
    last_error_.clear();
    // The lease was granted after `now`: it lasts at least until now + TTL
    // on the store's clock.
    held_.emplace(options_.ttl);
    held_->Taken(now, attempt->granted_ttl_seconds);
    next = held_->NextStep();
    if (stopping_) return kNever;  // nobody is left to serve
  }
  spdlog::info("serving lease of epoch {} taken (TTL {}, renewed every {})", options_.epoch,
               base::FormatDuration(std::min(
                   options_.ttl, Duration(std::chrono::seconds(attempt->granted_ttl_seconds)))),
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
  TimePoint deadline;
  std::optional<std::string> ended;
  {
    absl::MutexLock lock(&mu_);
    if (!held_) return kNever;
    ended = held_->Ended(now);
    if (!ended && !held_->RenewalDue(now)) return held_->NextStep();
    deadline = held_->KeepAliveDeadline(now);
  }
  if (ended) return Lose(*std::move(ended));
  auto renewal = backend_.KeepAlive(deadline);
  const TimePoint after = clock_.Now();
  std::optional<std::string> lost;
  {
    absl::MutexLock lock(&mu_);
    if (!held_) return kNever;  // stopped meanwhile
    const Duration valid_left = std::chrono::duration_cast<Duration>(held_->valid_until() - after);
    if (!renewal.ok()) {
      spdlog::warn("renewing the serving lease of epoch {} (valid {} more): {}", options_.epoch,
                   base::FormatDuration(valid_left), renewal.status().message());
      held_->RenewalFailed(after, std::string(renewal.status().message()));
      return held_->NextStep();
    }
    lost = held_->Renewed(now, after,
                          {.ttl_seconds = renewal->ttl_seconds,
                           .key = renewal->key,
                           .other = absl::StrCat("epoch ", renewal->key_epoch)});
    if (!lost) {
      spdlog::debug(
          "serving lease renewed (answered in {}); valid {} more",
          base::FormatDuration(std::chrono::duration_cast<Duration>(after - now)),
          base::FormatDuration(std::chrono::duration_cast<Duration>(held_->valid_until() - after)));
      return held_->NextStep();
    }
  }
  return Lose(*std::move(lost));
}

}  // namespace sharemgr
