// Leader election on a coordination.k8s.io/v1 Lease (docs/KUBERNETES.md "Two
// replicas"), with client-go's semantics where it has them: the leader keeps
// spec.holderIdentity and renews spec.renewTime every TTL/3 by a PUT that
// carries the resourceVersion it last wrote, so two writers never both win.
//
// No clock is compared across machines. A follower judges the Lease expired by
// observation: it notes on its own monotonic clock when it first saw the
// Lease's current resourceVersion, and takes it (a PUT carrying that version)
// only once that version has stood unchanged for a full lease duration:
//   - held by someone: its leaseDurationSeconds, clamped to [own TTL, 5 min]
//     (a holder's short or zero duration cannot hurry a takeover, a huge one
//     cannot stall the replicas for ever);
//   - holderless (a leader resigned): its leaseDurationSeconds, within
//     [1 s, 5 min];
//   - no Lease at all (never made, or deleted while a leader may still act):
//     the last duration seen, or own TTL, before creating it.
// The leader counts its validity from the send time of its last confirmed
// write (etcd::LeaseValidity), so it stops acting a fence margin before any
// follower can have waited out that write.
//
// The Lease is ours only while it names our id and the acquireTime we wrote
// when we took it: a restarted replica with the same id (a container restart
// keeps POD_NAME) waits like any other.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "base/clock.h"
#include "controller/ha/leader_election.h"
#include "kube/client.h"

namespace controller::kubernetes {

struct LeaseElectionOptions {
  std::string namespace_name;
  std::string lease_name;
  std::string id;        // this replica's holderIdentity
  base::Duration ttl{};  // its leaseDurationSeconds, and the shortest wait for another's
};

// Blocks the keeper's thread until `until` on the election's clock; tests
// move their fake clock instead.
using SleepUntil = std::function<void(base::TimePoint until)>;
SleepUntil RealSleepUntil(const base::TimeSource& clock);

// The backend on `client` (its own: give it a request timeout of
// etcd::LeaseCallTimeout of the TTL, each call must fit a renewal). A
// follower reads the Lease once per call (TTL/6, within [250 ms, 2 s]).
// No I/O until the first call.
std::unique_ptr<ElectionBackend> MakeLeaseElectionBackend(std::unique_ptr<kube::Client> client,
                                                          LeaseElectionOptions options,
                                                          const base::TimeSource& clock,
                                                          SleepUntil sleep_until);

}  // namespace controller::kubernetes
