// When a new pod of a volume may start under the serving lease (README
// "Highly available share-controller"), from what etcd holds at one revision:
// the lease key P/leases/<volume> (the holder) and P/epochs/<volume> (the
// highest epoch ever recorded). ServingLeaseGate reads both and asks this; the
// seeded simulation (tests/sharemgr/serving_lease_simulation_test.cc) asks it
// against its model of etcd, so both run one rule:
//
//   the old share-manager stops serving by its clock at s + TTL - m (+ its
//   stop time); etcd expires its lease no earlier than r + TTL, r >= s, on
//   its clock; with clock rates off by rho each, waiting
//   d >= 2 * rho * TTL + stop_time - m after seeing the key gone never
//   overlaps (the default, max(500 ms, TTL/50), covers rho = 1 % alone).
//
// Not thread-safe: its owner guards it.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "base/clock.h"
#include "controller/pod_runtime.h"

namespace controller {

class ServingLeaseStartRule {
 public:
  // `poll`: while the key is held, ask again this often.
  ServingLeaseStartRule(base::Duration drift_margin, base::Duration poll)
      : drift_margin_(drift_margin), poll_(poll) {}

  // Ready when no lease key is held for the volume (`holder` unset) and
  // either no epoch was ever recorded (`recorded` unset: the first pod) or
  // the drift margin has passed since the key was first seen gone by the
  // checks for this pod (a restart, or a new replacement, waits the margin
  // again). `now` on the asker's monotonic clock, read after the values were.
  StartCheck Check(const std::string& volume, uint64_t epoch,
                   const std::optional<std::string>& holder,
                   const std::optional<std::string>& recorded, base::TimePoint now);

 private:
  const base::Duration drift_margin_;
  const base::Duration poll_;
  // By volume: when its lease key was first seen gone (monotonic).
  std::map<std::string, base::TimePoint> seen_gone_;
};

}  // namespace controller
