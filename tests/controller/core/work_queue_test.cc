#include "controller/core/work_queue.h"

#include <doctest/doctest.h>

#include <set>
#include <thread>

#include "absl/strings/str_cat.h"

namespace controller {

using std::chrono::milliseconds;

TEST_CASE("a key is handed to one worker at a time and re-runs if added meanwhile") {
  WorkQueue queue;
  queue.Add("a");
  queue.Add("a");  // deduplicated while queued
  auto key = queue.Get();
  REQUIRE(key == "a");
  queue.Add("a");  // while processing: marked dirty, not handed out twice
  queue.Add("b");
  CHECK(queue.Get() == "b");
  queue.Done("b");
  queue.Done("a");
  CHECK(queue.Get() == "a");  // the dirty key came back after Done
}

// The queue has no clock seam: the two delays are far apart instead, so a
// queue where the later (or the last added) wake-up wins hands a key out a
// whole second late. Both orders: "a" gets the earlier one last, "b" first.
TEST_CASE("AddAfter delays, and of two AddAfters the earlier wake-up wins, whichever came first") {
  WorkQueue queue;
  const auto start = WorkQueue::Clock::now();
  queue.AddAfter("a", milliseconds(1200));
  queue.AddAfter("a", milliseconds(50));
  queue.AddAfter("b", milliseconds(50));
  queue.AddAfter("b", milliseconds(1200));
  std::set<std::string> keys;
  for (int i = 0; i < 2; ++i) {
    auto key = queue.Get();
    REQUIRE(key.has_value());
    keys.insert(*key);
    queue.Done(*key);
  }
  const auto waited = WorkQueue::Clock::now() - start;
  CHECK(keys == std::set<std::string>{"a", "b"});
  CHECK(waited >= milliseconds(50));
  CHECK(waited < milliseconds(1000));
}

TEST_CASE("failures back off exponentially per key up to the cap, Forget starts over") {
  WorkQueue queue({.base_backoff = milliseconds(200), .max_backoff = milliseconds(800)});
  // How long the key stays away after one more failure.
  auto backoff = [&] {
    const auto start = WorkQueue::Clock::now();
    queue.AddRateLimited("a");
    REQUIRE(queue.Get() == "a");
    queue.Done("a");
    return std::chrono::duration_cast<milliseconds>(WorkQueue::Clock::now() - start);
  };
  // Each delay is at least its step and well short of the next one: a constant,
  // linear or uncapped backoff fails one of the bounds.
  for (const int expected : {200, 400, 800, 800}) {
    CAPTURE(expected);
    const auto waited = backoff();
    CHECK(waited >= milliseconds(expected));
    CHECK(waited < milliseconds(expected * 19 / 10));
  }
  CHECK(queue.Failures("a") == 4);
  queue.Forget("a");
  CHECK(queue.Failures("a") == 0);
  const auto again = backoff();
  CHECK(again >= milliseconds(200));
  CHECK(again < milliseconds(380));
}

TEST_CASE("the overall rate limit spaces keys out") {
  WorkQueue queue({.rate_per_second = 100, .burst = 1});
  // StrCat, not "k" + std::to_string(i): GCC 12 at -O3 inlines that operator+
  // into a memcpy it wrongly reports as overlapping (-Werror=restrict).
  for (int i = 0; i < 5; ++i) queue.Add(absl::StrCat("k", i));
  const auto start = WorkQueue::Clock::now();
  for (int i = 0; i < 5; ++i) {
    auto key = queue.Get();
    REQUIRE(key.has_value());
    queue.Done(*key);
  }
  // 1 token up front, then 4 more at 100/s: at least ~40 ms.
  CHECK(WorkQueue::Clock::now() - start >= milliseconds(35));
}

TEST_CASE("ShutDown wakes blocked workers") {
  WorkQueue queue;
  std::thread worker([&] { CHECK_FALSE(queue.Get().has_value()); });
  std::this_thread::sleep_for(milliseconds(20));
  queue.ShutDown();
  worker.join();
}

}  // namespace controller

namespace controller {

// A failing pass that writes the store used to be woken by its own write at
// once, bypassing its backoff (550 Deletes in 3 s with a 200 ms base).
TEST_CASE("a store-change wake-up waits out the key's failure backoff") {
  WorkQueue queue({.base_backoff = milliseconds(200)});
  queue.Add("a");
  REQUIRE(queue.Get() == "a");
  const auto failed = WorkQueue::Clock::now();
  queue.AddRateLimited("a");
  queue.Done("a");
  queue.AddUnlessBackingOff("a");  // the failing pass's own store write
  REQUIRE(queue.Get() == "a");
  CHECK(WorkQueue::Clock::now() - failed >= milliseconds(190));
  queue.Done("a");
  queue.Forget("a");  // a success: no backoff left, wake-ups go at once
  const auto ok = WorkQueue::Clock::now();
  queue.AddUnlessBackingOff("a");
  REQUIRE(queue.Get() == "a");
  CHECK(WorkQueue::Clock::now() - ok < milliseconds(100));
}

}  // namespace controller
