// share-controller --kubernetes as one replica of several (docs/KUBERNETES.md
// "Two replicas"): the replicas elect one leader on a Lease
// (lease_election.h); only the leader writes. Followers keep their informers
// warm, so a new leader acts on what it already knows.
//
// Every write of the replica goes through WriteGate(), the write gate of the
// client that store, runtime and events share: it is asked right before each
// request goes on the wire and lets it go only while this replica's
// leadership is valid on its own monotonic clock. Leadership lost is final:
// `deposed` is told (share-controller exits kExitNotLeader, leaving every pod
// to the next leader).
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "controller/ha/ha_replica.h"
#include "controller/ha/leader_election.h"
#include "kube/config.h"

namespace controller::kubernetes {

// The Lease share-controller's replicas elect their leader on, and the only
// one deploy/base/rbac.yaml lets them update.
inline constexpr char kDefaultLeaderLease[] = "share-controller";

struct LeaseLeadershipOptions {
  kube::ClientConfig config;  // the election gets a client of its own
  std::string namespace_name;
  std::string lease_name = kDefaultLeaderLease;
  LeaderFlags leader;
};

class LeaseLeadership {
 public:
  // Ready to campaign, not campaigning: hand out WriteGate() first.
  static absl::StatusOr<std::unique_ptr<LeaseLeadership>> Create(
      LeaseLeadershipOptions options, DeposedHook deposed = ExitNotLeader);
  // Resign(), unless resigned already.
  ~LeaseLeadership();
  LeaseLeadership(const LeaseLeadership&) = delete;
  LeaseLeadership& operator=(const LeaseLeadership&) = delete;

  // For ClientOptions::write_gate; valid while this object lives (destroy
  // every client holding it first). OK only while this replica leads with
  // half the fence margin of validity left (the rest covers the request's
  // way to the apiserver), and never after Resign began.
  std::function<absl::Status()> WriteGate();
  // Starts the keeper thread: campaign, follow, lead. Once.
  void Campaign();
  // Blocks until this replica leads (true) or one of `signals` arrives
  // (false, *sig is it).
  bool AwaitLeadership(const sigset_t& signals, int* sig);
  bool Leading() const;
  // A follower's health: the last election call's failure (the Lease cannot
  // be read or updated: RBAC, or the apiserver gone), else OK.
  absl::Status Health() const;
  const LeaseLeadershipOptions& options() const { return options_; }

  // A clean stop is past acting (the workers stopped, or never started):
  // leadership lost from here on is logged, not reported to `deposed`, so
  // the stop goes on, releases the Lease and ends 0. The gate still refuses
  // every write once the leadership is not valid.
  void Stopping();
  // Once acting has ended: every write refused from here on, and the Lease
  // released (if it was won) so a follower takes over within a second.
  void Resign();

 private:
  class RecordingBackend;
  LeaseLeadership(LeaseLeadershipOptions options, DeposedHook deposed,
                  std::unique_ptr<ElectionBackend> backend);

  const LeaseLeadershipOptions options_;
  const DeposedHook deposed_;
  const base::Duration write_headroom_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> resigning_{false};
  std::atomic<bool> elected_{false};
  std::unique_ptr<RecordingBackend> backend_;
  std::unique_ptr<LeaderElection> election_;
};

}  // namespace controller::kubernetes
