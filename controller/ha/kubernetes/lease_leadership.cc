#include "controller/ha/kubernetes/lease_leadership.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/fmt_absl.h"
#include "controller/ha/kubernetes/lease_election.h"
#include "controller/ha/leader_gate.h"
#include "etcd/lease_validity.h"
#include "kube/client.h"

namespace controller::kubernetes {

// The election's calls, with the outcome of the last one kept for Health().
class LeaseLeadership::RecordingBackend final : public ElectionBackend {
 public:
  explicit RecordingBackend(std::unique_ptr<ElectionBackend> backend)
      : backend_(std::move(backend)) {}

  absl::StatusOr<Campaign> TryLead(int64_t ttl_seconds, base::TimePoint deadline) override {
    return Recorded(backend_->TryLead(ttl_seconds, deadline));
  }
  absl::StatusOr<bool> WaitVacant(base::TimePoint deadline) override {
    return Recorded(backend_->WaitVacant(deadline));
  }
  absl::StatusOr<etcd::LeaseRenewal> KeepAlive(base::TimePoint deadline) override {
    return Recorded(backend_->KeepAlive(deadline));
  }
  absl::Status Resign(base::TimePoint deadline) override { return backend_->Resign(deadline); }

  absl::Status last() const {
    absl::MutexLock lock(&mu_);
    return last_;
  }

 private:
  template <typename T>
  absl::StatusOr<T> Recorded(absl::StatusOr<T> result) {
    absl::MutexLock lock(&mu_);
    last_ = result.status();
    return result;
  }

  const std::unique_ptr<ElectionBackend> backend_;
  mutable absl::Mutex mu_;
  absl::Status last_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<LeaseLeadership>> LeaseLeadership::Create(
    LeaseLeadershipOptions options, DeposedHook deposed) {
  // Its own client, never behind the write gate it serves. Each call is
  // bounded by a renewal interval (TTL/3; the others' 10 s is for records):
  // every request connects and shakes hands anew, which on a loaded node
  // took longer than etcd's TTL/6 (the deploy test saw connects time out at
  // 833 ms). A renewal that hangs a whole interval leaves one more try
  // before the validity (TTL - TTL/5) ends; reusing connections would leave
  // more. A follower still reads the Lease every TTL/6 (LeaderElection's
  // slices).
  // At most 2 s, as etcd's: a long TTL must not make a stop outlast the
  // pod's grace (a renewal and a release are up to three calls each).
  const base::Duration call_timeout =
      std::min(etcd::LeaseRenewInterval(options.leader.ttl), base::Duration(2000));
  auto client = kube::Client::Create(
      options.config,
      {.request_timeout = call_timeout,
       .connect_timeout = call_timeout,
       .user_agent = absl::StrCat("share-controller/", options.leader.id, " (leader election)")});
  if (!client.ok()) return client.status();
  auto backend = MakeLeaseElectionBackend(*std::move(client),
                                          {.namespace_name = options.namespace_name,
                                           .lease_name = options.lease_name,
                                           .id = options.leader.id,
                                           .ttl = options.leader.ttl},
                                          base::BootClock(), RealSleepUntil(base::BootClock()));
  return std::unique_ptr<LeaseLeadership>(
      new LeaseLeadership(std::move(options), std::move(deposed), std::move(backend)));
}

LeaseLeadership::LeaseLeadership(LeaseLeadershipOptions options, DeposedHook deposed,
                                 std::unique_ptr<ElectionBackend> backend)
    : options_(std::move(options)),
      deposed_(std::move(deposed)),
      write_headroom_(etcd::LeaseFenceMargin(options_.leader.ttl) / 2),
      backend_(std::make_unique<RecordingBackend>(std::move(backend))) {
  election_ = std::make_unique<LeaderElection>(
      *backend_, base::BootClock(),
      LeaderElectionOptions{.id = options_.leader.id, .ttl = options_.leader.ttl},
      LeaderElection::Hooks{.elected = [this](int64_t) { elected_ = true; },
                            .deposed =
                                [this](const std::string& why) {
                                  // Stopping: the gate refuses every write
                                  // already (the leadership is not valid
                                  // any more), and a clean stop still ends 0.
                                  if (stopping_) {
                                    spdlog::warn("leadership lost while stopping: {}", why);
                                    return;
                                  }
                                  deposed_(why);
                                }});
}

// Whatever the path out (a signal before leading, a failed start), nothing
// acts any more once this goes: a Lease won meanwhile is released, not left
// to expire.
LeaseLeadership::~LeaseLeadership() { Resign(); }

std::function<absl::Status()> LeaseLeadership::WriteGate() {
  return [this]() -> absl::Status {
    if (resigning_) return NotLeaderError("stopping (the Lease is being released)");
    // Half the fence margin short of the validity's end: the other half is
    // for the request's travel to the apiserver.
    if (!election_->LeadingAt(base::BootClock().Now() + write_headroom_)) {
      return NotLeaderError(absl::StrCat("replica ", options_.leader.id, " does not hold Lease ",
                                         options_.lease_name, " now"));
    }
    return absl::OkStatus();
  };
}

void LeaseLeadership::Campaign() {
  spdlog::info("replica {} campaigning for Lease {}/{} (TTL {})", options_.leader.id,
               options_.namespace_name, options_.lease_name,
               base::FormatDuration(options_.leader.ttl));
  election_->Start();
}

bool LeaseLeadership::AwaitLeadership(const sigset_t& signals, int* sig) {
  return AwaitUnlessSignalled([this] { return Leading(); }, signals, sig);
}

bool LeaseLeadership::Leading() const { return elected_; }

absl::Status LeaseLeadership::Health() const {
  absl::Status last = backend_->last();
  if (last.ok()) return last;
  return absl::Status(last.code(),
                      absl::StrCat("leader election on Lease ", options_.namespace_name, "/",
                                   options_.lease_name, ": ", last.message()));
}

void LeaseLeadership::Stopping() { stopping_ = true; }

void LeaseLeadership::Resign() {
  stopping_ = true;
  resigning_ = true;
  election_->Stop(LeaderElection::StopMode::kResign).IgnoreError();
}

}  // namespace controller::kubernetes
