// The supervisor against real child processes (/bin/sleep stands in for
// ganesha) with a scripted prober: restart in place, hang detection, the
// death budget and stopping. The same logic runs against real ganesha in
// tests/integration.
#include "supervisor/supervisor.h"

#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "base/proc.h"
#include "tests/support/fake_time_source.h"
#include "tests/support/pid_file.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_for.h"

namespace supervisor {
namespace {

using std::chrono::milliseconds;

// Runs a Supervisor on its own loop thread and records every published status.
class Harness {
 public:
  // `clock`: what the supervisor reads for its deadlines (the steady clock
  // unless given); its timers run on real time either way.
  explicit Harness(SupervisorOptions options, std::vector<std::string> command = {"sleep", "1000"},
                   bool probe_short = false, const base::TimeSource* clock = nullptr,
                   Supervisor::SpawnHooks hooks = {})
      : probe_short_(probe_short), clock_(clock != nullptr ? *clock : steady_) {
    options.command = std::move(command);
    thread_ = std::thread([this, options, hooks = std::move(hooks)] {
      EventLoop loop;
      loop_ = &loop;
      Supervisor sup(
          loop, options,
          [this](base::Duration timeout) -> absl::Status {
            const int n = ++probes_;
            const bool answers_anyway = answer_every_ > 0 && n % answer_every_ == 0;
            if (probe_short_ && !answers_anyway) {
              std::this_thread::sleep_for(std::min(timeout, milliseconds(5)));
              return absl::ResourceExhaustedError("socket: Too many open files");
            }
            if (probe_ok_ || answers_anyway) return absl::OkStatus();
            const auto start = base::Clock::now();
            std::this_thread::sleep_for(std::min(timeout, milliseconds(20)));
            {
              std::lock_guard lock(mu_);
              failed_probes_.emplace_back(start, base::Clock::now());
            }
            return absl::DeadlineExceededError("scripted probe failure");
          },
          [this] { return ready_ ? absl::OkStatus() : absl::UnavailableError("not ready"); },
          clock_);
      sup_ = &sup;
      sup.SetSpawnHooks(hooks);
      sup.AddStatusObserver([this](const SupervisorStatus& s) {
        std::lock_guard lock(mu_);
        history_.push_back(s);
        cv_.notify_all();
      });
      sup.SetEvents({
          .died =
              [this, &sup](const Death& d) {
                std::lock_guard lock(mu_);
                deaths_.push_back(d);
                budget_left_ = sup.DeathBudgetLeft();
              },
          .probed =
              [this](base::Clock::duration, bool answered) {
                std::lock_guard lock(mu_);
                answered_probes_ += answered ? 1 : 0;
              },
          .missed =
              [this] {
                std::lock_guard lock(mu_);
                misses_++;
              },
          .hang_detected =
              [this](base::Clock::duration since) {
                std::lock_guard lock(mu_);
                hangs_.push_back(since);
              },
      });
      sup.AddUsageObserver([this](const ChildUsage& u) {
        std::lock_guard lock(mu_);
        usage_.push_back(u);
      });
      sup.Start();
      started_.set_value();
      loop.Run();
      outcome_ = sup.outcome();
      std::lock_guard lock(loop_mu_);
      sup_ = nullptr;
      loop_ = nullptr;  // gone with this scope: nothing may be posted to it any more
    });
    started_.get_future().wait();
  }
  ~Harness() {
    if (thread_.joinable()) {
      Run([](Supervisor& s) { s.Stop("test over"); });
      thread_.join();
    }
  }

  // Runs fn on the loop thread and waits for it; nothing once the run has ended.
  void Run(std::function<void(Supervisor&)> fn) {
    auto done = std::make_shared<std::promise<void>>();
    auto ran = done->get_future();
    {
      std::lock_guard lock(loop_mu_);
      if (loop_ == nullptr) return;
      loop_->Post([this, fn = std::move(fn), done] {
        if (sup_) fn(*sup_);
        done->set_value();
      });
    }
    // A loop that quits (the share FAILED) before it gets to the task never runs it.
    while (ran.wait_for(milliseconds(20)) != std::future_status::ready) {
      std::lock_guard lock(loop_mu_);
      if (loop_ == nullptr) return;
    }
  }

  SupervisorStatus WaitFor(const std::function<bool(const SupervisorStatus&)>& pred,
                           milliseconds timeout = milliseconds(10'000)) {
    std::unique_lock lock(mu_);
    const bool ok =
        cv_.wait_for(lock, timeout, [&] { return !history_.empty() && pred(history_.back()); });
    REQUIRE_MESSAGE(
        ok, "condition not reached; last reason: ", history_.empty() ? "" : history_.back().reason);
    return history_.back();
  }

  std::optional<Outcome> Join() {
    thread_.join();
    return outcome_;
  }

  // Waits for `count` more probes, or for `pid` to be replaced: whichever comes first.
  void ProbeWhileAlive(int count, pid_t pid) {
    const int from = probes_;
    REQUIRE(testing_support::WaitFor(
        [&] { return probes_ >= from + count || history().back().pid != pid; },
        milliseconds(10'000)));
  }

  std::vector<SupervisorStatus> history() {
    std::lock_guard lock(mu_);
    return history_;
  }
  // What the supervisor's events reported.
  std::vector<Death> deaths() {
    std::lock_guard lock(mu_);
    return deaths_;
  }
  std::vector<base::Clock::duration> hangs() {
    std::lock_guard lock(mu_);
    return hangs_;
  }
  int misses() {
    std::lock_guard lock(mu_);
    return misses_;
  }
  int answered_probes() {
    std::lock_guard lock(mu_);
    return answered_probes_;
  }
  int budget_left() {
    std::lock_guard lock(mu_);
    return budget_left_;
  }
  // When each failed probe started and ended, as the prober saw it.
  std::vector<std::pair<base::TimePoint, base::TimePoint>> failed_probes() {
    std::lock_guard lock(mu_);
    return failed_probes_;
  }
  std::vector<ChildUsage> usage() {
    std::lock_guard lock(mu_);
    return usage_;
  }

  std::atomic<bool> probe_ok_{true};
  // While probe_ok_ is false or probe_short_ is true, every answer_every_-th
  // probe still answers (0: none).
  std::atomic<int> answer_every_{0};
  std::atomic<int> probes_{0};
  std::atomic<bool> ready_{true};
  // Every probe fails here, before reaching the child (out of descriptors).
  std::atomic<bool> probe_short_{false};

 private:
  base::SteadyTimeSource steady_;
  const base::TimeSource& clock_;
  std::mutex loop_mu_;
  EventLoop* loop_ = nullptr;  // guarded by loop_mu_ once the run started
  Supervisor* sup_ = nullptr;
  std::promise<void> started_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SupervisorStatus> history_;
  std::vector<Death> deaths_;
  std::vector<base::Clock::duration> hangs_;
  int misses_ = 0;
  int answered_probes_ = 0;
  int budget_left_ = -1;
  std::vector<std::pair<base::TimePoint, base::TimePoint>> failed_probes_;
  std::vector<ChildUsage> usage_;
  std::optional<Outcome> outcome_;
  std::thread thread_;
};

SupervisorOptions FastOptions() {
  SupervisorOptions o;
  o.probe_interval = milliseconds(50);
  o.probe_failures = 3;
  o.start_timeout = milliseconds(2000);
  o.stop_timeout = milliseconds(500);
  o.failed_linger = milliseconds(100);
  o.restart.initial_backoff = milliseconds(10);
  o.restart.max_backoff = milliseconds(50);
  o.restart.max_deaths = 3;
  return o;
}

bool Alive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

// Whether our child `pid` has exited within `timeout` (left unreaped, for its owner).
bool ExitsWithin(pid_t pid, milliseconds timeout) {
  return testing_support::WaitFor(
      [&] {
        siginfo_t info{};
        return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
               info.si_pid == pid;
      },
      timeout);
}

// Stands in for a full stderr pipe: the thread that logs a line containing
// `needle` is held there until `pid` has exited (5 s at most), and whether it
// had is recorded.
class BlockingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit BlockingSink(std::string needle) : needle_(std::move(needle)) {}

  std::atomic<pid_t> pid{0};
  // Unset until the line is logged; then whether `pid` had exited.
  std::optional<bool> exited() const {
    const int v = verdict_;
    return v < 0 ? std::nullopt : std::optional<bool>(v == 1);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (std::string_view(msg.payload.data(), msg.payload.size()).find(needle_) ==
        std::string_view::npos) {
      return;
    }
    verdict_ = ExitsWithin(pid, milliseconds(5000)) ? 1 : 0;
  }
  void flush_() override {}

 private:
  const std::string needle_;
  std::atomic<int> verdict_{-1};
};

// Makes `sink` the default logger's only sink while it lives.
class DefaultLogTo {
 public:
  explicit DefaultLogTo(std::shared_ptr<spdlog::sinks::sink> sink)
      : previous_(spdlog::default_logger()) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", std::move(sink)));
  }
  ~DefaultLogTo() { spdlog::set_default_logger(previous_); }
  DefaultLogTo(const DefaultLogTo&) = delete;
  DefaultLogTo& operator=(const DefaultLogTo&) = delete;

 private:
  std::shared_ptr<spdlog::logger> previous_;
};

void CheckNeverRestarted(const SupervisorStatus& now, pid_t pid) {
  CHECK(now.pid == pid);
  CHECK(now.restarts == 0);
  CHECK_FALSE(now.last_exit.has_value());
  CHECK(Alive(pid));
}

auto StateIs(State s) {
  return [s](const SupervisorStatus& st) { return st.state == s; };
}

}  // namespace

TEST_CASE("a child that answers becomes SERVING, killing it restarts it in place") {
  Harness h(FastOptions());
  const auto serving = h.WaitFor(StateIs(State::kServing));
  const pid_t first = serving.pid;
  REQUIRE(Alive(first));
  kill(first, SIGKILL);
  // The first restart is immediate: DEGRADED may be gone before a waiter
  // looks, so wait for what stays (the exit recorded, SERVING, a new pid).
  const auto again = h.WaitFor(
      [&](const SupervisorStatus& s) { return s.state == State::kServing && s.pid != first; });
  REQUIRE(again.last_exit.has_value());
  CHECK(again.last_exit->signal == SIGKILL);
  CHECK(again.last_exit_cause == DeathCause::kSignaled);  // not sent by the supervisor
  const auto seen = h.history();
  CHECK(std::any_of(seen.begin(), seen.end(),
                    [](const SupervisorStatus& s) { return s.state == State::kDegraded; }));
  CHECK(again.restarts == 1);
  CHECK(Alive(again.pid));
}

TEST_CASE(
    "Reload before the child first answers is held until it does: SIGHUP's default action would "
    "kill it") {
  Harness h(FastOptions());  // sleep: SIGHUP kills it, as it does a ganesha still starting
  const pid_t first = h.WaitFor(StateIs(State::kServing)).pid;
  h.probe_ok_ = false;
  kill(first, SIGKILL);
  const pid_t second =
      h.WaitFor([&](const SupervisorStatus& s) { return s.pid > 0 && s.pid != first; }).pid;
  h.Run([](Supervisor& s) { s.Reload(); });
  CHECK(testing_support::HoldsFor([&] { return Alive(second); }, milliseconds(300)));
  // Held, not dropped: it arrives with the first answer.
  h.probe_ok_ = true;
  const auto reloaded = h.WaitFor([&](const SupervisorStatus& s) { return s.pid != second; });
  REQUIRE(reloaded.last_exit.has_value());
  CHECK(reloaded.last_exit->signal == SIGHUP);
}

TEST_CASE("readiness waits for the extra check, not just the probe") {
  SupervisorOptions options = FastOptions();
  Harness h(options);
  h.WaitFor(StateIs(State::kServing));
  h.ready_ = false;
  h.Run([](Supervisor& s) { s.Reevaluate(); });
  const auto degraded = h.WaitFor(StateIs(State::kDegraded));
  CHECK(degraded.reason == "not ready");
  CHECK(Alive(degraded.pid));  // the child is fine; nothing was killed
  h.ready_ = true;
  h.Run([](Supervisor& s) { s.Reevaluate(); });
  h.WaitFor(StateIs(State::kServing));
}

TEST_CASE("a child that stops answering is hung: killed after N misses and restarted") {
  Harness h(FastOptions());
  const pid_t first = h.WaitFor(StateIs(State::kServing)).pid;
  h.probe_ok_ = false;
  const auto killed = h.WaitFor(
      [&](const SupervisorStatus& s) { return s.last_exit.has_value() && s.pid != first; });
  CHECK(killed.last_exit->signal == SIGKILL);
  CHECK(killed.last_exit_description.find("hung: 3 NFS NULL probes missed") != std::string::npos);
  CHECK(killed.last_exit_cause == DeathCause::kHung);
  CHECK_FALSE(Alive(first));
  h.probe_ok_ = true;
  CHECK(h.WaitFor(StateIs(State::kServing)).restarts == 1);
}

TEST_CASE(
    "NULL probe misses count only in a row: an answer between misses starts the count again") {
  Harness h(FastOptions());  // 3 misses in a row mean hung
  const pid_t pid = h.WaitFor(StateIs(State::kServing)).pid;
  h.answer_every_ = 3;  // miss, miss, answer, miss, miss, answer, ...
  h.probe_ok_ = false;
  h.ProbeWhileAlive(30, pid);
  h.probe_ok_ = true;
  CheckNeverRestarted(h.history().back(), pid);
}

TEST_CASE(
    "a shortage that passes is never a reason to kill: probes that could not run here, fewer than "
    "--probe-failures in a row are no miss, and the misses longer runs count end at the next "
    "answer") {
  Harness h(FastOptions());  // 3 misses in a row mean hung
  const pid_t pid = h.WaitFor(StateIs(State::kServing)).pid;
  // 7 probes in a row that cannot run (two misses: after the 3rd and the
  // 6th), then an answer, over and over.
  h.answer_every_ = 8;
  h.probe_short_ = true;
  h.ProbeWhileAlive(40, pid);
  h.probe_short_ = false;
  h.answer_every_ = 0;
  // Real answers afterwards: still the same child, serving, never restarted.
  h.ProbeWhileAlive(3, pid);
  const auto now = h.history().back();
  CheckNeverRestarted(now, pid);
  CHECK(now.state == State::kServing);
}

TEST_CASE(
    "a shortage that lasts counts: --probe-failures probe intervals of it are one miss, so a hung "
    "child beside a descriptor leak is still killed") {
  Harness h(FastOptions());  // 3 misses in a row mean hung
  const pid_t first = h.WaitFor(StateIs(State::kServing)).pid;
  const int from = h.probes_;
  h.probe_short_ = true;  // for good: only a lasting shortage, no answer ever again
  const auto killed = h.WaitFor(
      [&](const SupervisorStatus& s) { return s.last_exit.has_value() && s.pid != first; });
  CHECK(killed.last_exit->signal == SIGKILL);
  CHECK(killed.last_exit_description.find("hung: 3 NFS NULL probes missed in a row (last: "
                                          "probes could not run here for ") != std::string::npos);
  CHECK(h.probes_ - from >= 9);  // 3 misses of 3 probe intervals each
  CHECK_FALSE(Alive(first));
  // As the metrics see it: three misses, a hang, not a signal.
  CHECK(h.misses() == 3);
  CHECK(h.hangs().size() == 1);
  REQUIRE(h.deaths().size() == 1);
  CHECK(h.deaths()[0].cause == DeathCause::kHung);
}

TEST_CASE(
    "a shortage is timed and not counted in rounds: after ProbeSoon's fast rounds it is still no "
    "miss until it has lasted --probe-failures probe intervals") {
  // No comma in this test's name: doctest's -tc splits its filter at commas,
  // and a filter that matches nothing runs nothing and passes.
  testing_support::FakeTimeSource clock;  // moves only when told
  Harness h(FastOptions(), {"sleep", "1000"}, /*probe_short=*/false, &clock);
  const pid_t pid = h.WaitFor(StateIs(State::kServing)).pid;
  h.ready_ = false;  // the fast window lasts until ready again
  h.Run([](Supervisor& s) { s.ProbeSoon(); });
  h.probe_short_ = true;
  // 30 short rounds (10 ms apart) and no time: counted in rounds, 3 x 3 of
  // them would have killed the child.
  const int from = h.probes_;
  h.ProbeWhileAlive(30, pid);
  CHECK(h.probes_ - from >= 9);
  CheckNeverRestarted(h.history().back(), pid);
  // 3 misses of 150 ms each: killed.
  for (int i = 0; i < 3; ++i) {
    clock.Advance(milliseconds(151));
    h.ProbeWhileAlive(2, pid);
  }
  const auto killed =
      h.WaitFor([&](const SupervisorStatus& s) { return s.last_exit.has_value() && s.pid != pid; });
  CHECK(killed.last_exit->signal == SIGKILL);
}

TEST_CASE(
    "a probe that cannot run here holds the start timeout, for at most another start timeout, and "
    "a "
    "real miss kills at once") {
  SupervisorOptions options = FastOptions();
  options.start_timeout = std::chrono::seconds(10);
  testing_support::FakeTimeSource clock;  // the deadlines move only when told
  SUBCASE("a real miss after the deadline") {
    Harness h(options, {"sleep", "1000"}, /*probe_short=*/true, &clock);
    const pid_t pid = h.WaitFor([](const SupervisorStatus& s) { return s.pid > 0; }).pid;
    // Some probes have been and gone (before the first, nothing holds the deadline).
    REQUIRE(testing_support::WaitFor([&] { return h.probes_ >= 5; }, milliseconds(10'000)));
    clock.Advance(options.start_timeout + milliseconds(1));
    // Probes that could not run, past the deadline: held.
    const int from = h.probes_;
    REQUIRE(testing_support::WaitFor([&] { return h.probes_ >= from + 30; }, milliseconds(10'000)));
    auto now = h.history().back();
    CHECK(now.pid == pid);
    CHECK(now.state == State::kStarting);
    CHECK_FALSE(now.last_exit.has_value());
    CHECK(Alive(pid));
    // A probe that reaches the child and gets no answer: the timeout applies again.
    h.probe_ok_ = false;
    h.probe_short_ = false;
    const auto killed =
        h.WaitFor([](const SupervisorStatus& s) { return s.last_exit.has_value(); });
    CHECK(killed.last_exit_description.find("did not answer NFS NULL within 10s of starting (") !=
          std::string::npos);
  }
  SUBCASE("a shortage that outlasts another start timeout") {
    Harness h(options, {"sleep", "1000"}, /*probe_short=*/true, &clock);
    const pid_t pid = h.WaitFor([](const SupervisorStatus& s) { return s.pid > 0; }).pid;
    REQUIRE(testing_support::WaitFor([&] { return h.probes_ >= 5; }, milliseconds(10'000)));
    clock.Advance(2 * options.start_timeout);
    const int from = h.probes_;
    REQUIRE(testing_support::WaitFor([&] { return h.probes_ >= from + 10; }, milliseconds(10'000)));
    CHECK(h.history().back().pid == pid);
    CHECK_FALSE(h.history().back().last_exit.has_value());  // held: not past it yet
    clock.Advance(milliseconds(1));
    const auto killed =
        h.WaitFor([](const SupervisorStatus& s) { return s.last_exit.has_value(); });
    CHECK(killed.last_exit_description.find(
              "did not answer NFS NULL within 10s of starting, nor 10s later while probes could "
              "not run here (last: could not probe here: socket: Too many open files)") !=
          std::string::npos);
  }
}

TEST_CASE("the death budget: one death more than allowed is FAILED, then the run ends") {
  SupervisorOptions options = FastOptions();
  options.restart.max_deaths = 2;
  Harness h(options);
  for (int i = 0; i < 3; ++i) {
    const auto s = h.WaitFor([](const SupervisorStatus& st) {
      return st.state == State::kServing || st.state == State::kFailed;
    });
    if (s.state == State::kFailed) break;
    REQUIRE(s.pid > 0);
    kill(s.pid, SIGKILL);
    h.WaitFor([&](const SupervisorStatus& st) { return st.pid != s.pid; });
  }
  const auto failed = h.WaitFor(StateIs(State::kFailed));
  CHECK(failed.reason.find("exceed the budget of 2") != std::string::npos);
  CHECK(failed.pid == 0);
  CHECK(h.Join() == Outcome::kFailed);
}

TEST_CASE("a program that cannot be executed spends the budget instead of looping") {
  Harness h(FastOptions(), {"/nonexistent/ganesha.nfsd"});
  const auto failed = h.WaitFor(StateIs(State::kFailed));
  CHECK(failed.reason.find("cannot start ganesha") != std::string::npos);
  CHECK(failed.last_exit_cause == DeathCause::kSpawnFailed);
  CHECK(h.Join() == Outcome::kFailed);
}

TEST_CASE("a child that never answers is killed at the start timeout") {
  SupervisorOptions options = FastOptions();
  options.start_timeout = milliseconds(200);
  Harness h(options);
  h.probe_ok_ = false;  // may race the first probe; the check below waits for a kill either way
  const auto killed = h.WaitFor([](const SupervisorStatus& s) {
    return s.last_exit.has_value() &&
           s.last_exit_description.find("did not answer NFS NULL within") != std::string::npos;
  });
  CHECK(killed.last_exit_cause == DeathCause::kStartTimeout);
}

TEST_CASE("Stop terminates the child, and a stopped (SIGSTOP) child too, then the run ends") {
  Harness h(FastOptions());
  const pid_t pid = h.WaitFor(StateIs(State::kServing)).pid;
  REQUIRE(pid > 0);
  kill(pid, SIGSTOP);
  h.Run([](Supervisor& s) { s.Stop("test"); });
  CHECK(h.Join() == Outcome::kStopped);
  CHECK_FALSE(Alive(pid));
  const auto last = h.history().back();
  CHECK(last.state == State::kStopping);
  CHECK(last.pid == 0);
  CHECK(last.last_exit_cause == DeathCause::kStopped);  // no death: the budget is untouched
}

TEST_CASE(
    "Fail with kKill: SIGKILL at once, also during a graceful stop (the serving lease is lost)") {
  SupervisorOptions options = FastOptions();
  // A SIGTERM followed by a wait, or a linger before the end, would outlast the test.
  options.stop_timeout = std::chrono::minutes(10);
  options.failed_linger = std::chrono::minutes(10);
  // A child that ignores SIGTERM: only SIGKILL ends it.
  const std::vector<std::string> stubborn = {"sh", "-c", "trap '' TERM; exec sleep 1000"};
  // Gone well within the stop timeout: killed, not waited for. When not, it is
  // killed here so the failing test ends instead of waiting the timeout out.
  // Started: it has set its trap and exec'd sleep (which keeps SIGTERM ignored).
  const auto IgnoresTerm = [](pid_t pid) {
    return testing_support::WaitFor(
        [&] {
          std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
          std::string name;
          return std::getline(comm, name) && name == "sleep";
        },
        milliseconds(10'000));
  };
  const auto DiesSoon = [](pid_t pid) {
    if (testing_support::WaitFor([&] { return !Alive(pid); }, milliseconds(10'000))) return true;
    kill(pid, SIGKILL);
    return false;
  };
  SUBCASE("serving") {
    Harness h(options, stubborn);
    const pid_t pid = h.WaitFor(StateIs(State::kServing)).pid;
    REQUIRE(pid > 0);
    REQUIRE(IgnoresTerm(pid));
    h.Run([](Supervisor& s) { s.Fail("lease lost: test", Supervisor::StopSignal::kKill); });
    CHECK(h.WaitFor(StateIs(State::kFailed)).reason == "lease lost: test");
    CHECK(DiesSoon(pid));
    // Its end is published (pid 0), so nothing reads a dead or reused pid's /proc.
    const auto reaped = h.WaitFor([](const SupervisorStatus& s) { return s.pid == 0; });
    CHECK(reaped.state == State::kFailed);
    REQUIRE(reaped.last_exit.has_value());
    CHECK(reaped.last_exit->signal == SIGKILL);
  }
  SUBCASE("stopping") {
    Harness h(options, stubborn);
    const pid_t pid = h.WaitFor(StateIs(State::kServing)).pid;
    REQUIRE(pid > 0);
    REQUIRE(IgnoresTerm(pid));
    h.Run([](Supervisor& s) { s.Stop("test"); });
    h.WaitFor(StateIs(State::kStopping));
    CHECK(Alive(pid));
    h.Run([](Supervisor& s) { s.Fail("lease lost: test", Supervisor::StopSignal::kKill); });
    CHECK(DiesSoon(pid));
    CHECK(h.Join() == Outcome::kStopped);
    const auto last = h.history().back();
    REQUIRE(last.last_exit.has_value());
    CHECK(last.last_exit->signal == SIGKILL);
    CHECK_FALSE(Alive(pid));
  }
}

TEST_CASE(
    "Fail with kKill: the child is SIGKILLed before anything is logged (a blocked log, e.g. a full "
    "stderr pipe, cannot hold the kill)") {
  Harness h(FastOptions());
  const pid_t pid = h.WaitFor(StateIs(State::kServing)).pid;
  REQUIRE(pid > 0);
  auto sink = std::make_shared<BlockingSink>("SIGKILL to ganesha");
  sink->pid = pid;
  {
    const DefaultLogTo blocked(sink);
    h.Run([](Supervisor& s) { s.Fail("lease lost: test", Supervisor::StopSignal::kKill); });
  }
  REQUIRE(sink->exited().has_value());
  CHECK(*sink->exited());
  if (!*sink->exited()) kill(pid, SIGKILL);
}

TEST_CASE(
    "spawn hooks: every spawn (the first, each restart) passes the gate and is announced with its "
    "pidfd, and a closed gate spawns nothing") {
  std::atomic<bool> open{true};
  std::atomic<int> asked{0};
  std::mutex mu;
  std::vector<pid_t> announced;
  Harness h(FastOptions(), {"sleep", "1000"}, false, nullptr,
            Supervisor::SpawnHooks{
                .may_spawn =
                    [&] {
                      ++asked;
                      return open.load();
                    },
                .spawned =
                    [&](const ChildProcess& child) {
                      CHECK(child.pidfd() >= 0);
                      std::lock_guard lock(mu);
                      announced.push_back(child.pid());
                      return absl::OkStatus();
                    },
            });
  const pid_t first = h.WaitFor(StateIs(State::kServing)).pid;
  CHECK(asked == 1);
  {
    std::lock_guard lock(mu);
    CHECK(announced == std::vector<pid_t>{first});
  }
  kill(first, SIGKILL);
  const pid_t second = h.WaitFor([&](const SupervisorStatus& s) {
                          return s.state == State::kServing && s.pid != first;
                        }).pid;
  CHECK(asked == 2);
  {
    std::lock_guard lock(mu);
    CHECK(announced == std::vector<pid_t>{first, second});
  }
  open = false;
  kill(second, SIGKILL);
  REQUIRE(testing_support::WaitFor([&] { return asked >= 3; }, milliseconds(10'000)));
  // Refused: no child since (the restart was asked for and skipped).
  CHECK(testing_support::HoldsFor([&] { return h.history().back().pid == 0; }, milliseconds(300)));
  std::lock_guard lock(mu);
  CHECK(announced.size() == 2);
}

TEST_CASE(
    "spawn hooks: the spawned hook sees the child before it runs the program, and its error "
    "cancels it: the program never runs, a failed start (spawn_failed) that costs a death") {
  const testing_support::TempDir dir;
  const std::string ran = dir.path() + "/ran";
  std::atomic<int> refused{0};
  std::mutex mu;
  std::vector<pid_t> seen;
  bool ran_before_hook = false;
  Harness h(FastOptions(), {"sh", "-c", "touch " + ran + "; exec sleep 1000"}, false, nullptr,
            Supervisor::SpawnHooks{
                .spawned =
                    [&](const ChildProcess& child) {
                      std::lock_guard lock(mu);
                      seen.push_back(child.pid());
                      // Held at its start gate: sh has not run yet.
                      ran_before_hook = ran_before_hook || std::filesystem::exists(ran);
                      ++refused;
                      return absl::FailedPreconditionError("no watchdog for it");
                    },
            });
  const auto failed = h.WaitFor(StateIs(State::kFailed));
  CHECK(failed.reason.find("no watchdog for it") != std::string::npos);
  const auto deaths = h.deaths();
  REQUIRE(deaths.size() == 4);  // every spawn refused, the budget spent
  for (const auto& death : deaths) CHECK(death.cause == DeathCause::kSpawnFailed);
  CHECK(refused == 4);
  CHECK_FALSE(std::filesystem::exists(ran));
  std::lock_guard lock(mu);
  CHECK_FALSE(ran_before_hook);
  // Each one reaped: nothing left of them.
  for (const pid_t pid : seen) {
    const auto stat = base::ReadProcStat(pid);
    CHECK_FALSE((stat.has_value() && stat->ppid == getpid()));
  }
}

TEST_CASE(
    "spawn hooks: a child killed at its start gate after the spawned hook let it go (a watchdog "
    "fired) is a failed start with its real exit, never a started ganesha") {
  const testing_support::TempDir dir;
  const std::string ran = dir.path() + "/ran";
  Harness h(FastOptions(), {"sh", "-c", "touch " + ran + "; exec sleep 1000"}, false, nullptr,
            Supervisor::SpawnHooks{
                .spawned =
                    [&](const ChildProcess& child) {
                      // As the fencer kills one whose lease is over: before Release.
                      kill(child.pid(), SIGKILL);
                      pollfd exited{child.pidfd(), POLLIN, 0};
                      poll(&exited, 1, 10'000);
                      return absl::OkStatus();
                    },
            });
  const auto failed = h.WaitFor(StateIs(State::kFailed));
  CHECK_MESSAGE(failed.reason.find("exited before release") != std::string::npos, failed.reason);
  REQUIRE(failed.last_exit.has_value());
  CHECK(failed.last_exit->signal == SIGKILL);
  const auto deaths = h.deaths();
  REQUIRE(deaths.size() == 4);
  for (const auto& death : deaths) {
    CHECK(death.cause == DeathCause::kSpawnFailed);
    CHECK(death.exit.signal == SIGKILL);
  }
  for (const auto& s : h.history()) CHECK(s.pid == 0);  // none counted as started
  CHECK_FALSE(std::filesystem::exists(ran));
}

// The child's usage as read_usage reports it: resident bytes set by the test,
// and a count of samples taken.
struct ScriptedUsage {
  std::atomic<uint64_t> rss_bytes{1 << 20};
  // When > 0, every Nth sample reads as 0 bytes (under any limit).
  std::atomic<int> low_every{0};
  std::atomic<int> samples{0};

  void Install(SupervisorOptions& options) {
    options.read_usage = [this](pid_t pid) -> std::optional<base::ProcessUsage> {
      if (!Alive(pid)) return std::nullopt;
      const int n = ++samples;
      const int every = low_every;
      return base::ProcessUsage{.rss_bytes = every > 0 && n % every == 0 ? 0 : rss_bytes.load(),
                                .threads = 1};
    };
  }
};

SupervisorOptions MemoryBoundOptions(ScriptedUsage& usage) {
  SupervisorOptions options = FastOptions();
  options.memory_limit_bytes = 100 << 20;
  options.memory_limit_samples = 3;
  usage.Install(options);
  return options;
}

TEST_CASE(
    "a child over the memory limit for N samples in a row is killed and restarted in place: a "
    "death of cause memory") {
  ScriptedUsage usage;  // outlives the harness, whose loop reads it
  Harness h(MemoryBoundOptions(usage));
  const pid_t first = h.WaitFor(StateIs(State::kServing)).pid;
  usage.rss_bytes = (100 << 20) + 1;
  const auto killed = h.WaitFor(
      [&](const SupervisorStatus& s) { return s.last_exit.has_value() && s.pid != first; });
  CHECK(killed.last_exit->signal == SIGKILL);
  CHECK(killed.last_exit_cause == DeathCause::kMemory);
  CHECK(killed.last_exit_description.find("memory: RSS 100.0 MiB over the limit of 100.0 MiB in "
                                          "3 samples in a row") != std::string::npos);
  CHECK(killed.memory_kills == 1);
  CHECK_FALSE(Alive(first));
  // The observers saw the count rise to the limit for the first child.
  std::vector<int> counts;
  for (const auto& sample : h.usage()) {
    if (sample.pid == first && sample.samples_over_limit > 0) {
      counts.push_back(sample.samples_over_limit);
    }
  }
  CHECK(counts == std::vector<int>{1, 2, 3});
  usage.rss_bytes = 1 << 20;
  const auto again = h.WaitFor(StateIs(State::kServing));
  CHECK(again.restarts == 1);
  CHECK(again.memory_kills == 1);
  // Under the limit it stays: samples go on, nothing more is killed.
  const int from = usage.samples;
  REQUIRE(
      testing_support::WaitFor([&] { return usage.samples >= from + 10; }, milliseconds(10'000)));
  CHECK(h.history().back().pid == again.pid);
  CHECK(h.history().back().restarts == 1);
}

TEST_CASE("memory over the limit counts only in a row, and without a limit never") {
  ScriptedUsage usage;
  SUBCASE("a sample under the limit starts the count again") {
    usage.low_every = 3;  // over, over, under, over, over, under, ... with 3 in a row needed
    usage.rss_bytes = uint64_t{1} << 40;
    Harness h(MemoryBoundOptions(usage));
    const pid_t pid = h.WaitFor(StateIs(State::kServing)).pid;
    REQUIRE(testing_support::WaitFor([&] { return usage.samples >= 30; }, milliseconds(10'000)));
    CheckNeverRestarted(h.history().back(), pid);
    CHECK(h.history().back().memory_kills == 0);
  }
  SUBCASE("no limit") {
    usage.rss_bytes = uint64_t{1} << 40;
    SupervisorOptions options = MemoryBoundOptions(usage);
    options.memory_limit_bytes = 0;
    Harness h(options);
    const pid_t pid = h.WaitFor(StateIs(State::kServing)).pid;
    REQUIRE(testing_support::WaitFor([&] { return usage.samples >= 30; }, milliseconds(10'000)));
    CheckNeverRestarted(h.history().back(), pid);
    // Sampled all the same, for the status and metrics.
    const auto samples = h.usage();
    REQUIRE_FALSE(samples.empty());
    CHECK(samples.back().pid == pid);
    CHECK(samples.back().usage.rss_bytes == uint64_t{1} << 40);
    CHECK(samples.back().samples_over_limit == 0);
  }
}

TEST_CASE("memory kills spend the death budget like any death: then FAILED") {
  ScriptedUsage usage;
  usage.rss_bytes = uint64_t{1} << 40;  // every child, always
  SupervisorOptions options = MemoryBoundOptions(usage);
  options.restart.max_deaths = 2;
  Harness h(options);
  const auto failed = h.WaitFor(StateIs(State::kFailed));
  CHECK(failed.reason.find("exceed the budget of 2") != std::string::npos);
  CHECK(failed.reason.find("memory: RSS") != std::string::npos);
  CHECK(failed.last_exit_cause == DeathCause::kMemory);
  CHECK(failed.memory_kills == 3);
  CHECK(h.Join() == Outcome::kFailed);
}

TEST_CASE("death causes have stable names") {
  CHECK(DeathCauseName(DeathCause::kExited) == "exited");
  CHECK(DeathCauseName(DeathCause::kSignaled) == "signal");
  CHECK(DeathCauseName(DeathCause::kHung) == "hung");
  CHECK(DeathCauseName(DeathCause::kStartTimeout) == "start_timeout");
  CHECK(DeathCauseName(DeathCause::kMemory) == "memory");
  CHECK(DeathCauseName(DeathCause::kSpawnFailed) == "spawn_failed");
  CHECK(DeathCauseName(DeathCause::kStopped) == "stopped");
}

TEST_CASE("orphans adopted by the supervisor are reaped: no zombies") {
  BecomeSubreaper();
  const testing_support::TempDir dir("sharemgr-orphan");
  const std::string pid_file = dir.path() + "/orphan.pid";
  // sh starts a grandchild, says its pid and exits; the grandchild is
  // re-parented to us, exits after 0.2 s and must be reaped.
  Harness h(FastOptions(), {"sh", "-c",
                            "(sleep 0.2 & " + testing_support::ShellWriteLastPid(pid_file) +
                                "); exec sleep 1000"});
  h.WaitFor(StateIs(State::kServing));
  const pid_t orphan = testing_support::WaitPidFile(pid_file, milliseconds(5000));
  REQUIRE(orphan > 0);
  // Reaped: no /proc entry is left, not even a zombie's (only its parent,
  // this process, can reap it, and only the supervisor here reaps).
  CHECK(testing_support::WaitFor(
      [&] { return !std::filesystem::exists("/proc/" + std::to_string(orphan)); },
      milliseconds(5000)));
  siginfo_t info{};
  // Nothing but the supervised child may be waitable (it is alive, so nothing at all).
  CHECK(waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) == 0);
  CHECK(info.si_pid == 0);
}

TEST_CASE(
    "BecomeSubreaper: an orphaned grandchild is re-parented to this process, which reaps it") {
  BecomeSubreaper();
  int report[2];
  REQUIRE(pipe(report) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child starts a grandchild, says its pid, and exits: the grandchild is orphaned.
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      pause();
      _exit(0);
    }
    [[maybe_unused]] auto n = write(report[1], &grandchild, sizeof(grandchild));
    _exit(0);
  }
  close(report[1]);
  pid_t grandchild = 0;
  const auto n = read(report[0], &grandchild, sizeof(grandchild));
  close(report[0]);
  REQUIRE(waitpid(child, nullptr, 0) == child);
  REQUIRE(n == sizeof(grandchild));
  REQUIRE(grandchild > 0);
  // The kernel re-parents an orphan when its parent exits, before the parent can be reaped.
  const auto stat = base::ReadProcStat(grandchild);
  kill(grandchild, SIGKILL);
  const pid_t reaped = waitpid(grandchild, nullptr, 0);  // only its parent can reap it
  CHECK(reaped == grandchild);
  REQUIRE(stat.has_value());
  CHECK(stat->ppid == getpid());
}

}  // namespace supervisor

namespace supervisor {

TEST_CASE(
    "events: a kill from outside is one death of cause signal, noticed after the kill, "
    "and restarted") {
  Harness h(FastOptions());  // 3 deaths allowed
  const pid_t first = h.WaitFor(StateIs(State::kServing)).pid;
  const auto killed_at = base::Clock::now();
  kill(first, SIGKILL);
  h.WaitFor(
      [&](const SupervisorStatus& s) { return s.state == State::kServing && s.pid != first; });
  const auto serving_at = base::Clock::now();
  const auto deaths = h.deaths();
  REQUIRE(deaths.size() == 1);
  CHECK(deaths[0].cause == DeathCause::kSignaled);
  CHECK(deaths[0].exit.signal == SIGKILL);
  CHECK(deaths[0].restarting);
  // The loop's wake-up on the exit, not an older one: after the kill.
  CHECK(deaths[0].noticed >= killed_at);
  CHECK(deaths[0].noticed + deaths[0].detection <= serving_at);
  CHECK(h.budget_left() == 2);
  CHECK(h.hangs().empty());
  CHECK(h.misses() == 0);
  CHECK(h.answered_probes() > 0);
}

TEST_CASE("events: a hang is N misses, one hang detection, one death of cause hang") {
  Harness h(FastOptions());  // 3 misses in a row mean hung
  const pid_t first = h.WaitFor(StateIs(State::kServing)).pid;
  h.probe_ok_ = false;
  h.WaitFor([&](const SupervisorStatus& s) { return s.last_exit.has_value() && s.pid != first; });
  const auto deaths = h.deaths();
  REQUIRE(deaths.size() == 1);
  CHECK(deaths[0].cause == DeathCause::kHung);
  CHECK(deaths[0].exit.signal == SIGKILL);  // killed here, counted as a hang, not a signal
  CHECK(h.misses() == 3);
  const auto hangs = h.hangs();
  REQUIRE(hangs.size() == 1);
  // From the first miss's send to the third's return: at least from the
  // first failed probe's start to the third one's end, as the prober saw them.
  const auto failed = h.failed_probes();
  REQUIRE(failed.size() >= 3);
  CHECK(hangs[0] >= failed[2].second - failed[0].first);
  h.probe_ok_ = true;
  h.WaitFor(StateIs(State::kServing));
}

TEST_CASE("events: a child that never answers dies of start_timeout") {
  SupervisorOptions options = FastOptions();
  options.start_timeout = milliseconds(200);
  Harness h(options);
  h.probe_ok_ = false;
  h.WaitFor([](const SupervisorStatus& s) { return s.last_exit.has_value(); });
  const auto deaths = h.deaths();
  REQUIRE_FALSE(deaths.empty());
  // The first probe may have answered before probe_ok_ flipped: then a hang.
  CHECK((deaths[0].cause == DeathCause::kStartTimeout || deaths[0].cause == DeathCause::kHung));
  CHECK(h.misses() == (deaths[0].cause == DeathCause::kHung ? 3 : 0));
}

TEST_CASE(
    "events: exits by themselves carry their code, the one past the budget restarts "
    "nothing") {
  Harness h(FastOptions(), {"sh", "-c", "exit 7"});  // 3 deaths allowed, the 4th fails
  h.WaitFor(StateIs(State::kFailed));
  const auto deaths = h.deaths();
  REQUIRE(deaths.size() == 4);
  for (size_t i = 0; i < deaths.size(); ++i) {
    CAPTURE(i);
    CHECK(deaths[i].cause == DeathCause::kExited);
    CHECK(deaths[i].exit.code == 7);
    CHECK(deaths[i].restarting == (i < 3));
  }
  CHECK(h.budget_left() == 0);
}

TEST_CASE("events: a program that cannot be executed dies of spawn_failed") {
  Harness h(FastOptions(), {"/nonexistent/ganesha.nfsd"});
  h.WaitFor(StateIs(State::kFailed));
  const auto deaths = h.deaths();
  REQUIRE(deaths.size() == 4);
  CHECK(deaths.front().cause == DeathCause::kSpawnFailed);
  CHECK(deaths.front().restarting);
  CHECK_FALSE(deaths.back().restarting);
}

}  // namespace supervisor
