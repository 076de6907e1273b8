// When a new pod of a volume may start under the serving lease (docs/DESIGN-NOTES.md
// "Highly available share-controller"), from what etcd holds at one revision:
// the lease key P/leases/<volume> (the holder) and P/epochs/<volume> (the
// highest epoch ever recorded, and the etcd lease its holder took it on;
// values: etcd/serving_lease_record.h), and the TTL etcd reports for that
// lease. ServingLeaseGate reads them and asks this; the seeded simulation
// (tests/sharemgr/serving_lease_simulation_test.cc) asks it against its
// model of etcd, so both run one rule:
//
//   the old share-manager stops serving by its clock at s + TTL - m (+ its
//   stop time); etcd expires its lease no earlier than r + TTL, r >= s, on
//   its clock; with clock rates off by rho each, waiting
//   d >= 2 * rho * TTL + stop_time - m after seeing the lease gone never
//   overlaps (the default, max(500 ms, TTL/50), covers rho = 1 % alone).
//
// "Gone" is the key AND the recorded holder's etcd lease: a key deleted by
// hand (etcdctl del) while that lease lives leaves its holder serving until
// its next renewal reads the key gone, so the margin counts from when both
// were seen gone. A record naming no lease (written before records named
// one) cannot be asked about: the rule says so (an unknown holder) and waits
// the margin from the key's end only; the share-manager of the new epoch
// waits a whole TTL for such a holder itself (sharemgr/etcd_lease_backend.h).
//
// An epoch at or below the one recorded (or held) never starts: its pod would
// be refused the lease. The check says which epochs it saw, and the
// reconciler moves the share above them.
//
// Not thread-safe: its owner guards it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "base/clock.h"
#include "controller/runtime/pod_runtime.h"

namespace controller {

// What etcd holds for a volume, read at one revision (values unset: absent).
struct ServingLeaseKeys {
  std::optional<std::string> holder;    // P/leases/<volume>
  std::optional<std::string> recorded;  // P/epochs/<volume>
  // The TTL (seconds; -1: not found, gone) etcd reports for the lease
  // `recorded` names, read after the keys: asked only when the key is absent
  // and the record names a lease (RecordedLeaseToAsk).
  std::optional<int64_t> recorded_lease_ttl;
};

// The etcd lease whose TTL the rule needs for these keys, or nullopt.
std::optional<int64_t> RecordedLeaseToAsk(const ServingLeaseKeys& keys);

class ServingLeaseStartRule {
 public:
  // `poll`: while the key or the recorded lease is held, ask again this often.
  ServingLeaseStartRule(base::Duration drift_margin, base::Duration poll)
      : drift_margin_(drift_margin), poll_(poll) {}

  // Ready when `epoch` is above every epoch recorded or held, no lease key is
  // held for the volume, and either no epoch was ever recorded (the first
  // pod) or the drift margin has passed since the key and the recorded lease
  // were first seen gone by the checks for this pod (a restart, or a new
  // replacement, waits the margin again). A record naming a lease whose TTL
  // is not given counts as held. Never ready while the record is not an
  // epoch (mended by hand), or while a holder of `epoch` itself holds the
  // key (its pod runs: the asker must not move above it). `now` on the
  // asker's monotonic clock, read after the values were.
  StartCheck Check(const std::string& volume, uint64_t epoch, const ServingLeaseKeys& keys,
                   base::TimePoint now);

 private:
  const base::Duration drift_margin_;
  const base::Duration poll_;
  // By volume: when its lease key and the recorded lease were first seen
  // gone (monotonic), and the record that named that lease.
  struct SeenGone {
    std::string record;
    base::TimePoint at;
  };
  std::map<std::string, SeenGone> seen_gone_;
};

}  // namespace controller
