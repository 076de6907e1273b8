// Leader election in etcd (docs/DESIGN-NOTES.md "Highly available share-controller"), under
// the deployment's key prefix P (the store's):
//   P/leader  the leader's replica id, attached to its etcd lease: present
//             exactly while a leader is alive. Created only when absent, so
//             its create_revision names one term of leadership: the fencing
//             token every store write of the leader compares
//             (EtcdStore::SetWriteGuard).
#pragma once

#include <memory>
#include <string>

#include "base/clock.h"
#include "controller/ha/leader_election.h"
#include "controller/store/etcd_store.h"
#include "etcd/client.h"

namespace controller {

std::string LeaderKey(const std::string& prefix);

// The write guard of a leadership won with `token`: every write fails
// FAILED_PRECONDITION "not leader" once P/leader is gone or another term's.
WriteGuard LeaderWriteGuard(const std::string& prefix, int64_t token);

// The backend on `client` (give it a call timeout of etcd::LeaseCallTimeout
// of the TTL: each call must fit a renewal). No I/O until the first call.
std::unique_ptr<ElectionBackend> MakeEtcdElectionBackend(std::shared_ptr<etcd::EtcdClient> client,
                                                         const std::string& prefix,
                                                         const std::string& id,
                                                         const base::TimeSource& clock);

}  // namespace controller
