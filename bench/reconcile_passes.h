// What the controller benchmarks share: shares to serve in a store, and one
// thread's reconcile passes per second over them at steady state (every
// share RUNNING on a simulated cluster), whatever the store.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/abort_run.h"
#include "controller/core/reconciler.h"
#include "controller/store/store.h"
#include "controller/testing/simulated_runtime.h"

namespace bench {

// `n` shares to serve, each named after its volume: <prefix>0, <prefix>1, ...
inline std::vector<std::string> CreateShares(controller::Store& store, const std::string& prefix,
                                             int n) {
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) {
    sharemanager::controller::v1::ShareRecord r;
    r.set_name(prefix + std::to_string(i));
    r.mutable_spec()->set_volume(r.name());
    r.mutable_spec()->set_serve(true);
    ValueOrAbort(store.Create(r), "store Create");
    names.push_back(r.name());
  }
  return names;
}

struct PassRate {
  uint64_t passes = 0;
  double seconds = 0;
  double per_second() const { return static_cast<double>(passes) / seconds; }
};

// `shares` shares created in `store`, their pods created and observed
// serving; then `measuring` runs, then passes round-robin for `seconds`.
inline PassRate MeasurePasses(
    controller::Store& store, int shares, double seconds,
    const std::function<void()>& measuring = [] {}) {
  using Clock = std::chrono::steady_clock;
  controller::SimulatedCluster cluster;
  controller::FakeWallClock clock;
  controller::Reconciler reconciler(store, cluster, cluster, clock, clock);
  const auto names = CreateShares(store, "vol-", shares);
  for (int round = 0; round < 3; ++round) {  // create pods, observe them serving
    for (const auto& name : names) reconciler.Reconcile(name);
  }
  measuring();
  PassRate rate;
  const auto start = Clock::now();
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (Clock::now() < end) {
    // The clock is read every 64 passes: a pass on MemoryStore is a few µs.
    for (size_t i = 0; i < names.size() && (i % 64 != 0 || Clock::now() < end); ++i) {
      reconciler.Reconcile(names[i]);
      ++rate.passes;
    }
  }
  rate.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return rate;
}

}  // namespace bench
