#include "controller/ha/leader_election.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "base/fmt_absl.h"

namespace controller {

using base::TimePoint;

LeaderElection::LeaderElection(ElectionBackend& backend, const base::TimeSource& clock,
                               LeaderElectionOptions options, Hooks hooks)
    : LeaseKeeper(clock, options.ttl, "leadership", absl::StrCat("of ", options.id)),
      backend_(backend),
      options_(std::move(options)),
      hooks_(std::move(hooks)) {}

LeaderElection::~LeaderElection() { Stop(StopMode::kLetExpire).IgnoreError(); }

absl::Status LeaderElection::Stop(StopMode mode) {
  const bool elected = EndThread();
  if (mode != StopMode::kResign || !elected) return absl::OkStatus();
  auto status = backend_.Resign(clock_.Now() + etcd::LeaseCallTimeout(options_.ttl));
  if (status.ok()) {
    spdlog::info("leadership of {} resigned", options_.id);
  } else {
    spdlog::warn("resigning the leadership of {}: {} (it expires within {})", options_.id,
                 status.message(), base::FormatDuration(options_.ttl));
  }
  return status;
}

std::optional<int64_t> LeaderElection::token() const {
  absl::MutexLock lock(&mu_);
  return token_;
}

TimePoint LeaderElection::StepTaking(TimePoint now) {
  bool following = false;
  {
    absl::MutexLock lock(&mu_);
    following = following_;
  }
  return following ? StepFollow(now) : StepCampaign(now);
}

absl::StatusOr<etcd::LeaseRenewal> LeaderElection::KeepAlive(TimePoint deadline) {
  return backend_.KeepAlive(deadline);
}

void LeaderElection::OnLost(const std::string& why) {
  if (hooks_.deposed) hooks_.deposed(why);
}

TimePoint LeaderElection::StepCampaign(TimePoint now) {
  {
    absl::MutexLock lock(&mu_);
    if (now < not_before_) return not_before_;
  }
  auto campaign =
      backend_.TryLead(etcd::TtlSeconds(options_.ttl), now + etcd::LeaseCallTimeout(options_.ttl));
  const TimePoint after = clock_.Now();
  if (!campaign.ok()) {
    if (const auto held_back = failure_log_.Admit()) {
      spdlog::warn("campaigning for leadership: {}{}", campaign.status().message(),
                   base::LogLimiter::HeldBack(*held_back));
    }
    absl::MutexLock lock(&mu_);
    not_before_ = after + etcd::LeaseRetryPause(options_.ttl);
    return not_before_;
  }
  if (!campaign->won) {
    absl::MutexLock lock(&mu_);
    if (campaign->leader != leader_seen_) {
      spdlog::info("following the leader {}", campaign->leader);
      leader_seen_ = campaign->leader;
    }
    following_ = true;
    return after;
  }
  {
    absl::MutexLock lock(&mu_);
    token_ = campaign->token;
    leader_seen_ = options_.id;
  }
  // The lease was granted after `now`: it lasts at least until now + TTL on
  // etcd's clock.
  const std::optional<TimePoint> next = Held(now, after, campaign->granted_ttl_seconds);
  if (!next) return kNever;  // stopping (nobody is left to act), or won too late (deposed)
  spdlog::info("elected leader {} (fencing token {}; TTL {}, renewed every {})", options_.id,
               campaign->token, base::FormatDuration(options_.ttl),
               base::FormatDuration(etcd::LeaseRenewInterval(options_.ttl)));
  if (hooks_.elected) hooks_.elected(campaign->token);
  return *next;
}

TimePoint LeaderElection::StepFollow(TimePoint now) {
  // A slice of waiting at a time, so that Stop never waits long for it.
  auto vacant = backend_.WaitVacant(now + etcd::LeaseCallTimeout(options_.ttl));
  const TimePoint after = clock_.Now();
  if (!vacant.ok()) {
    if (const auto held_back = failure_log_.Admit()) {
      spdlog::warn("watching the leader: {}{}", vacant.status().message(),
                   base::LogLimiter::HeldBack(*held_back));
    }
    return after + etcd::LeaseRetryPause(options_.ttl);
  }
  if (!*vacant) return after;  // the next slice at once
  // No drift margin before campaigning: the old leader stopped acting at its
  // valid_until, a fence margin (max(500 ms, TTL/5)) before etcd could expire
  // its lease, which covers clock-rate differences many times over; its store
  // writes are refused by the write guard whatever its clock says.
  spdlog::info("the leader is gone; campaigning");
  absl::MutexLock lock(&mu_);
  following_ = false;
  return after;
}

bool AwaitUnlessSignalled(const std::function<bool()>& done, const sigset_t& signals, int* sig) {
  const timespec slice{.tv_sec = 0, .tv_nsec = 100'000'000};
  while (!done()) {
    siginfo_t info{};
    const int got = sigtimedwait(&signals, &info, &slice);
    if (got > 0) {
      *sig = got;
      return false;
    }
  }
  return true;
}

}  // namespace controller
