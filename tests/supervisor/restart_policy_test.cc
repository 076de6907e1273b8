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

// A crash streak: `deaths` deaths, each 10 ms after its start, restarted after
// the delay it was given; those delays, in ms. None may give up.
std::vector<int64_t> StreakDelays(RestartPolicy& policy, base::TimePoint& now, int deaths) {
  policy.OnStart(now);
  std::vector<int64_t> delays;
  for (int i = 0; i < deaths; ++i) {
    now += milliseconds(10);
    const auto d = policy.OnDeath(now);
    CHECK_FALSE(d.give_up);
    delays.push_back(d.delay.count());
    now += d.delay;
    policy.OnStart(now);
  }
  return delays;
}

}  // namespace

TEST_CASE("an isolated crash restarts at once, a crash streak backs off exponentially to the cap") {
  RestartPolicy policy(Options());
  base::TimePoint now{};
  CHECK(StreakDelays(policy, now, 5) == std::vector<int64_t>{0, 100, 200, 400, 800});
  now += milliseconds(10);
  CHECK(policy.OnDeath(now).give_up);  // the 6th death within the window
}

// docs/DESIGN-NOTES.md "Restart policy" with the options every test above replaces (the
// daemon ships these: daemon_config_test).
TEST_CASE(
    "the default policy is the README's: a streak backs off 100 ms doubling to 5 s, a run of 10 s "
    "(not 9.9 s) ends it, a 6th death within 10 minutes (not 10 min 5 s) gives up") {
  RestartPolicy streak({});
  base::TimePoint now{};
  CHECK(StreakDelays(streak, now, 5) == std::vector<int64_t>{0, 100, 200, 400, 800});
  now += milliseconds(10);
  CHECK(streak.OnDeath(now).give_up);

  RestartPolicy capped({.max_deaths = 100});
  const auto delays = StreakDelays(capped, now, 10);
  CHECK(delays.back() == 5000);  // 100 ms doubled six times would be 6.4 s
  CHECK(delays[delays.size() - 2] == 5000);

  RestartPolicy stable({});
  stable.OnStart(now);
  CHECK(stable.OnDeath(now).delay == base::Duration(0));
  stable.OnStart(now);
  now += milliseconds(9'900);
  CHECK(stable.OnDeath(now).delay == milliseconds(100));  // still a streak
  stable.OnStart(now);
  now += seconds(10);
  CHECK(stable.OnDeath(now).delay == base::Duration(0));  // stable: at once

  // Six deaths 119 s apart: the 6th, 9 min 55 s after the first, gives up.
  RestartPolicy within({});
  for (int i = 1; i <= 6; ++i) {
    CAPTURE(i);
    within.OnStart(now);
    now += seconds(119);
    CHECK(within.OnDeath(now).give_up == (i == 6));
  }
  // 121 s apart: by the 6th the first has left the 10-minute window.
  RestartPolicy beyond({});
  for (int i = 1; i <= 6; ++i) {
    CAPTURE(i);
    beyond.OnStart(now);
    now += seconds(121);
    CHECK_FALSE(beyond.OnDeath(now).give_up);
  }
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

namespace supervisor {

TEST_CASE("deaths in the window: counted as OnDeath counts them, and they age out") {
  RestartPolicy policy(Options());  // 5 deaths within 10 minutes
  base::TimePoint now{};
  policy.OnStart(now);
  CHECK(policy.DeathsInWindow(now) == 0);
  now += minutes(1);
  CHECK(policy.OnDeath(now).deaths_in_window == 1);
  now += minutes(4);
  CHECK(policy.OnDeath(now).deaths_in_window == 2);
  CHECK(policy.DeathsInWindow(now) == 2);
  CHECK(policy.DeathsInWindow(now + minutes(6)) == 2);   // the first exactly 10 min old
  CHECK(policy.DeathsInWindow(now + minutes(7)) == 1);   // the first aged out
  CHECK(policy.DeathsInWindow(now + minutes(10)) == 1);  // the second exactly 10 min old
  CHECK(policy.DeathsInWindow(now + minutes(11)) == 0);
  CHECK(policy.OnDeath(now + minutes(7)).deaths_in_window == 2);  // the same rule
}

}  // namespace supervisor
