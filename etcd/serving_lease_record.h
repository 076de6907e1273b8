// The values of the serving lease's keys (docs/DESIGN-NOTES.md "Serving lease"), as the
// share-managers write them (sharemgr/etcd_lease_backend.h) and the
// controller reads them (controller/ha/serving_lease_start_rule.h): one parser,
// so that both sides agree on what a record says.
//   P/leases/<volume>  "<epoch, 20 digits> <holder>"
//   P/epochs/<volume>  "<epoch, 20 digits> <etcd lease, hex>", or only the
//                      epoch in records written before they named a lease
// Zero-padded decimals sort as numbers, so etcd compares their values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace etcd {

// An epoch as the keys hold it: 20 digits, zero-padded.
std::string PaddedEpoch(uint64_t epoch);

// The epoch a key's value starts with, or nullopt when it does not parse.
std::optional<uint64_t> EpochOf(const std::string& value);

// The holder a lease key's value names ("?" when it names none).
std::string HolderOf(const std::string& value);

// The etcd lease an epoch record names, or nullopt for a record written
// before records named one (or unreadable).
std::optional<int64_t> RecordedLeaseOf(const std::string& value);

// The epoch record of a holder of `epoch` on etcd lease `lease`.
std::string EpochRecord(uint64_t epoch, int64_t lease);

}  // namespace etcd
