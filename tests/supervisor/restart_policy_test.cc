#include "supervisor/restart_policy.h"

#include <doctest/doctest.h>

namespace supervisor {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

RestartPolicyOptions Options() {
  RestartPolicyOptions o;
  o.initial_backoff = milliseconds(100);
  o.max_backoff = milliseconds(1000);
  o.stable_after = seconds(30);
  o.max_deaths = 5;
  o.death_window = minutes(10);
  return o;
}

}  // namespace

TEST_CASE("an isolated crash restarts at once, a crash streak backs off exponentially to the cap") {
  RestartPolicy policy(Options());
  base::TimePoint now{};
  policy.OnStart(now);
  std::vector<int64_t> delays;
  for (int i = 0; i < 5; ++i) {
    now += milliseconds(10);
    const auto d = policy.OnDeath(now);
    CHECK_FALSE(d.give_up);
    delays.push_back(d.delay.count());
    now += d.delay;
    policy.OnStart(now);
  }
  CHECK(delays == std::vector<int64_t>{0, 100, 200, 400, 800});
  now += milliseconds(10);
  CHECK(policy.OnDeath(now).give_up);  // the 6th death within the window
}

TEST_CASE("backoff is capped") {
  auto options = Options();
  options.max_deaths = 100;
  RestartPolicy policy(options);
  base::TimePoint now{};
  base::Duration last{0};
  for (int i = 0; i < 20; ++i) {
    now += milliseconds(1);
    last = policy.OnDeath(now).delay;
    policy.OnStart(now);
  }
  CHECK(last == milliseconds(1000));
}

TEST_CASE("a stable run resets the streak: the next death restarts immediately") {
  RestartPolicy policy(Options());
  base::TimePoint now{};
  policy.OnStart(now);
  now += milliseconds(1);
  CHECK(policy.OnDeath(now).delay == base::Duration(0));
  policy.OnStart(now);
  now += milliseconds(1);
  CHECK(policy.OnDeath(now).delay == milliseconds(100));
  policy.OnStart(now);
  now += seconds(31);  // ran long enough to count as stable
  CHECK(policy.OnDeath(now).delay == base::Duration(0));
}

TEST_CASE("deaths older than the window leave the budget") {
  RestartPolicy policy(Options());
  base::TimePoint now{};
  for (int i = 0; i < 5; ++i) {
    policy.OnStart(now);
    now += minutes(3);  // five deaths, 3 minutes apart: never more than 4 in 10 minutes
    const auto d = policy.OnDeath(now);
    CHECK_FALSE(d.give_up);
    CHECK(d.deaths_in_window <= 4);
  }
}

TEST_CASE("max_deaths 0 gives up on the first death") {
  auto options = Options();
  options.max_deaths = 0;
  RestartPolicy policy(options);
  policy.OnStart(base::TimePoint{});
  const auto d = policy.OnDeath(base::TimePoint{} + seconds(1));
  CHECK(d.give_up);
  CHECK(d.deaths_in_window == 1);
}

}  // namespace supervisor
