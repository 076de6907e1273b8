// The serving lease in etcd (docs/DESIGN-NOTES.md "Serving lease"), under the deployment's
// key prefix P:
//   P/leases/<volume>  "<epoch, 20 digits> <holder>", attached to the holder's
//                      etcd lease: present exactly while a holder is alive
//   P/epochs/<volume>  "<epoch, 20 digits> <etcd lease, hex>": the highest
//                      epoch that ever took it and the etcd lease it took it
//                      on (the record itself on no lease: it outlives every
//                      holder). The next epoch, finding the key gone, waits
//                      for that lease too: a key deleted by hand does not
//                      stop its holder. A record naming no lease (written
//                      before records did) is waited out for a whole TTL.
// Zero-padded decimals sort as numbers, so etcd compares their values.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "etcd/client.h"
#include "etcd/serving_lease_record.h"
#include "sharemgr/daemon_config.h"
#include "sharemgr/serving_lease.h"

namespace sharemgr {

std::string LeaseKey(const LeaseConfig& config);
std::string EpochKey(const LeaseConfig& config);
// The keys' values: etcd/serving_lease_record.h.
using etcd::PaddedEpoch;

// The etcd client the backend uses: the configured members, each call
// bounded by LeaseCallTimeout.
etcd::EtcdOptions LeaseClientOptions(const LeaseConfig& config);

// The backend on the configured etcd members. No I/O until the first call.
absl::StatusOr<std::unique_ptr<LeaseBackend>> MakeEtcdLeaseBackend(const LeaseConfig& config,
                                                                   const base::TimeSource& clock);
// The same with the client's options given (tests add interceptors).
absl::StatusOr<std::unique_ptr<LeaseBackend>> MakeEtcdLeaseBackend(
    const LeaseConfig& config, const base::TimeSource& clock, etcd::EtcdOptions client_options);

}  // namespace sharemgr
