#include "sharemgr/status_board.h"

#include <doctest/doctest.h>

#include <thread>

namespace sharemgr {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

}  // namespace

TEST_CASE("the version moves only when the status really changes") {
  StatusBoard board;
  board.Update([](auto& s) { s.set_state(sharemanager::v1::STARTING); });
  const uint64_t v1 = board.Snapshot().version();
  CHECK(v1 == 1);
  board.Update([](auto& s) { s.set_state(sharemanager::v1::STARTING); });
  CHECK(board.Snapshot().version() == v1);
  board.Update([](auto& s) { s.set_state(sharemanager::v1::SERVING); });
  CHECK(board.Snapshot().version() == v1 + 1);
}

TEST_CASE("WaitNewer wakes on a change, times out without one, and ends on Close") {
  StatusBoard board;
  board.Update([](auto& s) { s.set_reason("a"); });
  const uint64_t seen = board.Snapshot().version();
  CHECK_FALSE(board.WaitNewer(seen, SteadyClock::now() + milliseconds(20)).has_value());

  std::thread writer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    board.Update([](auto& s) { s.set_reason("b"); });
  });
  const auto next = board.WaitNewer(seen, SteadyClock::now() + milliseconds(5000));
  writer.join();
  REQUIRE(next.has_value());
  CHECK(next->reason() == "b");

  std::thread closer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    board.Close();
  });
  CHECK_FALSE(
      board.WaitNewer(next->version(), SteadyClock::now() + milliseconds(5000)).has_value());
  closer.join();
  CHECK(board.closed());
}

}  // namespace sharemgr
