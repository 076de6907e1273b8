#include "etcd/lease_keeper.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "absl/time/time.h"
#include "base/fmt_absl.h"

namespace etcd {
namespace {

using base::Duration;
using base::TimePoint;

Duration Left(TimePoint from, TimePoint until) {
  return std::chrono::duration_cast<Duration>(until - from);
}

}  // namespace

LeaseKeeper::LeaseKeeper(const base::TimeSource& clock, Duration ttl, std::string kind,
                         std::string whose)
    : clock_(clock), ttl_(ttl), kind_(std::move(kind)), whose_(std::move(whose)) {}

LeaseKeeper::~LeaseKeeper() {
  // A thread still running would call a subclass already destroyed.
  if (thread_.joinable()) {
    spdlog::critical("{} {}: keeper destroyed with its thread running", kind_, whose_);
    std::abort();
  }
}

void LeaseKeeper::Start() {
  thread_ = std::thread([this] { ThreadMain(); });
}

void LeaseKeeper::ThreadMain() {
  for (;;) {
    const TimePoint next = Step();
    absl::MutexLock lock(&mu_);
    // Lost is final: nothing is left to do until EndThread joins.
    if (stopping_ || next == kNever) return;
    const Duration wait = Left(clock_.Now(), next);
    if (wait > Duration::zero()) {
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(wait));
    }
    if (stopping_) return;
  }
}

bool LeaseKeeper::EndThread() {
  {
    absl::MutexLock lock(&mu_);
    if (phase_ == Phase::kStopped) return false;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  phase_ = Phase::kStopped;
  held_.reset();
  return ever_held_;
}

bool LeaseKeeper::ValidAt(TimePoint now) const {
  absl::MutexLock lock(&mu_);
  return phase_ == Phase::kHeld && held_ && now < held_->valid_until();
}

std::optional<TimePoint> LeaseKeeper::valid_until() const {
  absl::MutexLock lock(&mu_);
  if (phase_ != Phase::kHeld || !held_) return std::nullopt;
  return held_->valid_until();
}

TimePoint LeaseKeeper::Step() {
  const TimePoint now = clock_.Now();
  Phase phase;
  {
    absl::MutexLock lock(&mu_);
    phase = phase_;
  }
  switch (phase) {
    case Phase::kTaking:
      return StepTaking(now);
    case Phase::kHeld:
      return StepRenew(now);
    case Phase::kLost:
    case Phase::kStopped:
      break;
  }
  return kNever;
}

std::optional<TimePoint> LeaseKeeper::Held(TimePoint sent, TimePoint answered,
                                           int64_t granted_ttl_seconds) {
  std::optional<std::string> late;
  {
    absl::MutexLock lock(&mu_);
    phase_ = Phase::kHeld;
    ever_held_ = true;  // in etcd, even when confirmed too late: a clean stop gives it up
    held_.emplace(ttl_);
    late = held_->Taken(sent, answered, granted_ttl_seconds);
    if (!late && !stopping_) return held_->NextStep();
  }
  // Confirmed so late that its validity is over: acting now could overlap a
  // replacement etcd let in meanwhile.
  if (late) Lose(*std::move(late));
  return std::nullopt;
}

TimePoint LeaseKeeper::Lose(std::string why) {
  {
    absl::MutexLock lock(&mu_);
    if (phase_ == Phase::kLost || phase_ == Phase::kStopped) return kNever;
    phase_ = Phase::kLost;
    held_.reset();
  }
  // The hook first: it fences, and logging may block (a full stderr) for as
  // long as nobody reads it.
  OnLost(why);
  spdlog::error("{} {}: {}", kind_, whose_, why);
  return kNever;
}

TimePoint LeaseKeeper::StepRenew(TimePoint now) {
  TimePoint deadline;
  std::optional<std::string> lost;
  {
    absl::MutexLock lock(&mu_);
    if (!held_) return kNever;
    lost = held_->Ended(now);
    if (!lost && !held_->RenewalDue(now)) return held_->NextStep();
    deadline = held_->KeepAliveDeadline(now);
  }
  if (lost) return Lose(*std::move(lost));
  auto renewal = KeepAlive(deadline);
  const TimePoint after = clock_.Now();
  // Logged after mu_ is released: a log line may block (a full stderr), and
  // ValidAt, which the serving side asks, must never wait for it.
  TimePoint next, valid_until;
  {
    absl::MutexLock lock(&mu_);
    if (!held_) return kNever;  // stopped meanwhile
    if (renewal.ok()) {
      lost = held_->Renewed(now, after, *renewal);
    } else {
      held_->RenewalFailed(after, std::string(renewal.status().message()));
    }
    if (!lost) {
      next = held_->NextStep();
      valid_until = held_->valid_until();
    }
  }
  if (lost) return Lose(*std::move(lost));
  if (renewal.ok()) OnRenewed(valid_until);
  if (!renewal.ok()) {
    spdlog::warn("renewing the {} {} (valid {} more): {}", kind_, whose_,
                 base::FormatDuration(Left(after, valid_until)), renewal.status().message());
  } else {
    spdlog::debug("{} renewed (answered in {}); valid {} more", kind_,
                  base::FormatDuration(Left(now, after)),
                  base::FormatDuration(Left(after, valid_until)));
  }
  return next;
}

}  // namespace etcd
