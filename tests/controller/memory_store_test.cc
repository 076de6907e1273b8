#include "controller/memory_store.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "controller/faulty_store.h"

namespace controller {
namespace {

ShareRecord Record(const std::string& name) {
  ShareRecord r;
  r.set_name(name);
  r.mutable_spec()->set_volume(name);
  r.mutable_spec()->set_serve(true);
  return r;
}

}  // namespace

TEST_CASE("optimistic concurrency: a write with a stale resource_version conflicts") {
  MemoryStore store;
  auto created = store.Create(Record("a"));
  REQUIRE(created.ok());
  CHECK(store.Create(Record("a")).status().code() == absl::StatusCode::kAlreadyExists);
  auto first = *created;
  auto second = *created;
  first.mutable_status()->set_reason("first");
  REQUIRE(store.Update(first).ok());
  second.mutable_status()->set_reason("second");
  const auto conflict = store.Update(second);
  CHECK(IsConflict(conflict.status()));
  CHECK(store.Get("a")->status().reason() == "first");
}

TEST_CASE("spec_generation moves with the spec only") {
  MemoryStore store;
  auto r = *store.Create(Record("a"));
  CHECK(r.spec_generation() == 1);
  r.mutable_status()->set_reason("x");
  r = *store.Update(r);
  CHECK(r.spec_generation() == 1);
  r.mutable_spec()->set_serve(false);
  r = *store.Update(r);
  CHECK(r.spec_generation() == 2);
}

TEST_CASE("watchers hear about every change") {
  MemoryStore store;
  std::vector<std::string> seen;
  store.Watch([&](const std::string& name) { seen.push_back(name); });
  auto r = *store.Create(Record("a"));
  (void)store.Update(r);
  (void)store.Delete("a");
  CHECK(seen == std::vector<std::string>{"a", "a", "a"});
}

TEST_CASE("a file-backed store survives a restart") {
  const std::string path = "/tmp/sharemgr-store-test-" + std::to_string(getpid()) + ".jsonl";
  {
    auto store = MemoryStore::OpenFile(path);
    REQUIRE(store.ok());
    auto r = *(*store)->Create(Record("a"));
    r.mutable_status()->set_epoch(4);
    REQUIRE((*store)->Update(r).ok());
    REQUIRE((*store)->Create(Record("b")).ok());
  }
  auto reopened = MemoryStore::OpenFile(path);
  REQUIRE(reopened.ok());
  CHECK((*reopened)->Get("a")->status().epoch() == 4);
  CHECK((*reopened)->List()->size() == 2);
  // Versions continue past the loaded ones: no stale write can sneak in.
  auto b = *(*reopened)->Get("b");
  auto a = *(*reopened)->Get("a");
  CHECK(((*reopened)->Update(b)->resource_version() > a.resource_version()));
  {
    std::ofstream corrupt(path, std::ios::app);
    corrupt << "{not json\n";
  }
  CHECK(MemoryStore::OpenFile(path).status().code() == absl::StatusCode::kDataLoss);
  std::filesystem::remove(path);
}

TEST_CASE("the faulty store fails the k-th call, and a timeout-after still takes effect") {
  MemoryStore memory;
  FaultyStore store(memory);
  store.faults().FailCall(2, Fault::kFail);
  REQUIRE(store.Create(Record("a")).ok());                                  // call 1
  CHECK(store.Get("a").status().code() == absl::StatusCode::kUnavailable);  // call 2
  CHECK(store.Get("a").ok());                                               // call 3
  store.faults().FailCall(1, Fault::kTimeoutAfter);
  auto r = *memory.Get("a");
  r.mutable_status()->set_reason("applied");
  CHECK(store.Update(r).status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(memory.Get("a")->status().reason() == "applied");
  store.faults().FailCall(1, Fault::kTimeoutBefore);
  r = *memory.Get("a");
  r.mutable_status()->set_reason("not applied");
  CHECK(store.Update(r).status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(memory.Get("a")->status().reason() == "applied");
}

TEST_CASE("seeded random faults replay identically") {
  auto run = [](uint64_t seed) {
    FaultInjector faults;
    faults.Randomize(seed, 0.3);
    std::vector<int> out;
    for (int i = 0; i < 200; ++i) out.push_back(static_cast<int>(faults.Next()));
    return out;
  };
  CHECK(run(42) == run(42));
  CHECK(run(42) != run(43));
}

}  // namespace controller
