// The fault injector through the wrappers that use it: FaultyStore and
// FaultyPodRuntime.
#include "controller/testing/fault_injector.h"

#include <doctest/doctest.h>

#include <chrono>

#include "controller/store/memory_store.h"
#include "controller/testing/faulty_pod_runtime.h"
#include "controller/testing/faulty_store.h"
#include "tests/controller/sim_fixture.h"

namespace controller {

TEST_CASE(
    "a delay fault holds the call for the delay set, then runs it, and the faulty store and pod "
    "runtime pass List, Delete and Watch through, counting each call") {
  MemoryStore memory;
  FaultyStore store(memory);
  int heard = 0;
  store.Watch([&](const std::string&) { ++heard; });
  REQUIRE(store.Create(ServedShare("a")).ok());
  CHECK(heard == 1);
  store.faults().SetDelay(std::chrono::milliseconds(20));
  CHECK(store.faults().delay() == std::chrono::milliseconds(20));
  store.faults().FailCall(1, Fault::kDelay);
  const auto start = std::chrono::steady_clock::now();
  auto listed = store.List();
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(20));
  REQUIRE(listed.ok());
  CHECK(listed->size() == 1);
  CHECK(store.Delete("a").ok());
  CHECK(store.faults().calls() == 3);  // Create, List, Delete

  FakeWallClock clock;
  SimulatedCluster cluster(&clock);
  FaultyPodRuntime runtime(cluster);
  int pod_events = 0;
  runtime.Watch([&](const std::string&) { ++pod_events; });
  pb::ShareSpec spec;
  spec.set_volume("v");
  REQUIRE(runtime.Create(spec, 1).ok());
  CHECK(pod_events > 0);
}

}  // namespace controller
