// The serving lease's fencer: the real `share-manager lease-fencer` process
// guarding /bin/sleep children (standing in for ganesha). Its use by the
// daemon (share-manager SIGSTOPped while serving) is in
// tests/integration/serving_lease_test.cc.
#include "sharemgr/lease_fencer.h"

#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "tests/support/daemon_process.h"
#include "tests/support/require_ok.h"
#include "tests/support/wait_for.h"

namespace sharemgr {
namespace {

using std::chrono::milliseconds;
using testing_support::RequireOk;

// An EventLoop on its own thread; tasks run on it and are waited for.
class LoopThread {
 public:
  LoopThread() {
    thread_ = std::thread([this] { loop_.Run(); });
  }
  ~LoopThread() {
    loop_.Post([this] { loop_.Quit(); });
    thread_.join();
  }
  supervisor::EventLoop& loop() { return loop_; }
  template <typename F>
  auto Run(F fn) {
    std::packaged_task<decltype(fn())()> task(std::move(fn));
    auto result = task.get_future();
    loop_.Post([&task] { task(); });
    return result.get();
  }

 private:
  supervisor::EventLoop loop_;
  std::thread thread_;
};

// A child standing in for ganesha; killed and reaped when the test ends.
struct Sleeper {
  supervisor::ChildProcess child = RequireOk(supervisor::ChildProcess::Spawn({"sleep", "1000"}));
  ~Sleeper() {
    child.SignalGroup(SIGKILL);
    pollfd exited{child.pidfd(), POLLIN, 0};
    poll(&exited, 1, 10'000);
    (void)child.Reap();
  }
  // Exited (unreaped) within `timeout`.
  bool ExitsWithin(milliseconds timeout) const {
    return testing_support::WaitFor(
        [&] {
          siginfo_t info{};
          return waitid(P_PIDFD, static_cast<id_t>(child.pidfd()), &info,
                        WEXITED | WNOHANG | WNOWAIT) == 0 &&
                 info.si_pid == child.pid();
        },
        timeout);
  }
  bool Alive() const { return !ExitsWithin(milliseconds(0)); }
};

// The fencer, started on `loop`, with its failures recorded.
struct Fencer {
  explicit Fencer(LoopThread& loop) : loop_(loop) {
    fencer = loop.Run([&] {
      return RequireOk(LeaseFencer::Start(
          loop.loop(),
          {testing_support::ShareManagerBinary(), kLeaseFencerCommand, "lease-fencer-test"},
          [this](const std::string& why) {
            std::lock_guard lock(mu);
            failures.push_back(why);
          }));
    });
  }
  ~Fencer() {
    loop_.Run([&] { fencer.reset(); });
  }
  // Armed for `child` until `valid_until`, in the daemon's order: the
  // validity first.
  absl::Status ArmUntil(const supervisor::ChildProcess& child, base::TimePoint valid_until) {
    if (auto extended = fencer->Extend(valid_until); !extended.ok()) return extended;
    return fencer->Arm(child);
  }
  std::vector<std::string> Failures() {
    std::lock_guard lock(mu);
    return failures;
  }

  LoopThread& loop_;
  std::unique_ptr<LeaseFencer> fencer;
  std::mutex mu;
  std::vector<std::string> failures;
};

base::TimePoint BootIn(milliseconds d) { return base::BootClock().Now() + d; }

// Extended every kExtendEvery, each time kDeadline ahead: a busy machine may
// delay a step by most of a deadline before the child is killed early.
constexpr milliseconds kDeadline{1000};
constexpr milliseconds kExtendEvery{200};

}  // namespace

TEST_CASE(
    "lease fencer: an armed child lives while its deadline is extended, and is SIGKILLed once the "
    "deadline passes without an extension") {
  LoopThread loop;
  Fencer f(loop);
  Sleeper ganesha;
  REQUIRE(loop.Run([&] { return f.ArmUntil(ganesha.child, BootIn(kDeadline)); }).ok());
  // Extended well before each deadline, for several deadlines' worth.
  base::TimePoint last{};
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(kExtendEvery);
    last = BootIn(kDeadline);
    REQUIRE(loop.Run([&] { return f.fencer->Extend(last); }).ok());
  }
  CHECK(ganesha.Alive());
  REQUIRE(ganesha.ExitsWithin(milliseconds(10'000)));
  // Not before the last deadline (the fencer's clock is the same CLOCK_BOOTTIME).
  CHECK(base::BootClock().Now() >= last);
  siginfo_t info{};
  REQUIRE(waitid(P_PIDFD, static_cast<id_t>(ganesha.child.pidfd()), &info,
                 WEXITED | WNOHANG | WNOWAIT) == 0);
  CHECK(info.si_code == CLD_KILLED);
  CHECK(info.si_status == SIGKILL);
  CHECK(f.Failures().empty());
}

TEST_CASE("lease fencer: a deadline that has passed already kills at once") {
  LoopThread loop;
  Fencer f(loop);
  Sleeper ganesha;
  REQUIRE(loop.Run([&] { return f.ArmUntil(ganesha.child, base::BootClock().Now()); }).ok());
  CHECK(ganesha.ExitsWithin(milliseconds(10'000)));
}

TEST_CASE("lease fencer: armed before any validity was heard of, it kills at once") {
  LoopThread loop;
  Fencer f(loop);
  Sleeper ganesha;
  REQUIRE(loop.Run([&] { return f.fencer->Arm(ganesha.child); }).ok());
  CHECK(ganesha.ExitsWithin(milliseconds(10'000)));
}

TEST_CASE(
    "lease fencer: Extend from another thread while the loop thread arms the child again and "
    "again (both through its mutex): the child lives past every deadline but the last") {
  LoopThread loop;
  // Before the fencer: a re-arm still queued when it goes reads them.
  std::atomic<bool> extending{true};
  std::atomic<int> rearmed{0};
  std::atomic<int> rearm_failures{0};
  Fencer f(loop);
  Sleeper ganesha;
  REQUIRE(loop.Run([&] { return f.ArmUntil(ganesha.child, BootIn(kDeadline)); }).ok());
  // The loop thread busy arming the same child (with the validity last
  // extended) until the extensions end.
  std::function<void()> rearm = [&] {
    if (!extending) return;
    if (!f.fencer->Arm(ganesha.child).ok()) ++rearm_failures;
    ++rearmed;
    // Not faster: each Arm passes a pidfd to the fencer process, and one
    // slowed down (ASan) would let the channel fill, refusing the next.
    std::this_thread::sleep_for(milliseconds(10));
    loop.loop().Post(rearm);
  };
  loop.loop().Post(rearm);
  base::TimePoint last{};
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(kExtendEvery);
    last = BootIn(kDeadline);
    REQUIRE(f.fencer->Extend(last).ok());  // this thread, not the loop's
  }
  extending = false;
  // Twice: a re-arm running as the flag fell posts one more, behind the first.
  loop.Run([] {});
  loop.Run([] {});
  CHECK(rearmed > 10);
  CHECK(rearm_failures == 0);
  CHECK(ganesha.Alive());
  REQUIRE(ganesha.ExitsWithin(milliseconds(10'000)));
  CHECK(base::BootClock().Now() >= last);
  CHECK(f.Failures().empty());
}

TEST_CASE(
    "lease fencer: its channel's end (share-manager gone) SIGKILLs the armed child at once, and "
    "the fencer exits") {
  LoopThread loop;
  Fencer f(loop);
  Sleeper ganesha;
  const pid_t fencer_pid = f.fencer->pid();
  REQUIRE(
      loop.Run([&] { return f.ArmUntil(ganesha.child, BootIn(milliseconds(3'600'000))); }).ok());
  const auto exit = loop.Run([&] { return f.fencer->Stop(base::Duration(5000)); });
  REQUIRE(exit.ok());
  CHECK(exit->code == 0);
  CHECK(ganesha.ExitsWithin(milliseconds(10'000)));
  CHECK(kill(fencer_pid, 0) != 0);  // reaped: nothing left
}

TEST_CASE(
    "lease fencer: armed anew for each child: the newest is fenced, the one before is left "
    "alone") {
  LoopThread loop;
  Fencer f(loop);
  Sleeper old_ganesha;
  Sleeper new_ganesha;
  REQUIRE(loop.Run([&] { return f.ArmUntil(old_ganesha.child, BootIn(milliseconds(200))); }).ok());
  REQUIRE(loop.Run([&] { return f.ArmUntil(new_ganesha.child, BootIn(milliseconds(200))); }).ok());
  CHECK(new_ganesha.ExitsWithin(milliseconds(10'000)));
  CHECK(old_ganesha.Alive());
}

TEST_CASE(
    "lease fencer: in a process group of its own, and when it dies share-manager is told (the "
    "switch is off)") {
  LoopThread loop;
  Fencer f(loop);
  const pid_t pid = f.fencer->pid();
  CHECK(getpgid(pid) == pid);
  CHECK(getpgid(pid) != getpgrp());
  kill(pid, SIGKILL);
  REQUIRE(testing_support::WaitFor([&] { return !f.Failures().empty(); }, milliseconds(10'000)));
  CHECK(f.Failures()[0].find("lease fencer pid " + std::to_string(pid) + " killed by signal 9") !=
        std::string::npos);
  // Told nothing more: arming a dead fencer is an error, not a silent no-op.
  Sleeper ganesha;
  CHECK_FALSE(loop.Run([&] { return f.ArmUntil(ganesha.child, BootIn(milliseconds(100))); }).ok());
}

}  // namespace sharemgr
