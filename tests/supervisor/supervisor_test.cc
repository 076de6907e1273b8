// The supervisor against real child processes (/bin/sleep stands in for
// ganesha) with a scripted prober: restart in place, hang detection, the
// death budget and stopping. The same logic runs against real ganesha in
// tests/integration.
#include "supervisor/supervisor.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "tests/support/pid_file.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_for.h"

namespace supervisor {
namespace {

using std::chrono::milliseconds;

// Runs a Supervisor on its own loop thread and records every published status.
class Harness {
 public:
  explicit Harness(SupervisorOptions options, std::vector<std::string> command = {"sleep", "1000"},
                   bool probe_short = false)
      : probe_short_(probe_short) {
    options.command = std::move(command);
    thread_ = std::thread([this, options] {
      EventLoop loop;
      loop_ = &loop;
      Supervisor sup(
          loop, options,
          [this](base::Duration timeout) -> absl::Status {
            const int n = ++probes_;
            if (probe_short_) {
              std::this_thread::sleep_for(std::min(timeout, milliseconds(5)));
              return absl::ResourceExhaustedError("socket: Too many open files");
            }
            if (probe_ok_ || (answer_every_ > 0 && n % answer_every_ == 0)) {
              return absl::OkStatus();
            }
            std::this_thread::sleep_for(std::min(timeout, milliseconds(20)));
            return absl::DeadlineExceededError("scripted probe failure");
          },
          [this] { return ready_ ? absl::OkStatus() : absl::UnavailableError("not ready"); },
          clock_);
      sup_ = &sup;
      sup.AddStatusObserver([this](const SupervisorStatus& s) {
        std::lock_guard lock(mu_);
        history_.push_back(s);
        cv_.notify_all();
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
  std::vector<ChildUsage> usage() {
    std::lock_guard lock(mu_);
    return usage_;
  }

  std::atomic<bool> probe_ok_{true};
  // While probe_ok_ is false, every answer_every_-th probe still answers (0: none).
  std::atomic<int> answer_every_{0};
  std::atomic<int> probes_{0};
  std::atomic<bool> ready_{true};
  // Every probe fails here, before reaching the child (out of descriptors).
  std::atomic<bool> probe_short_{false};

 private:
  base::SteadyTimeSource clock_;
  std::mutex loop_mu_;
  EventLoop* loop_ = nullptr;  // guarded by loop_mu_ once the run started
  Supervisor* sup_ = nullptr;
  std::promise<void> started_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<SupervisorStatus> history_;
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
    "a probe that cannot run here (out of descriptors) is no miss: the child is never killed for "
    "it") {
  Harness h(FastOptions());  // 3 misses in a row mean hung
  const pid_t pid = h.WaitFor(StateIs(State::kServing)).pid;
  h.probe_short_ = true;
  h.ProbeWhileAlive(30, pid);
  h.probe_short_ = false;
  // Real answers afterwards: still the same child, serving, never restarted.
  h.ProbeWhileAlive(3, pid);
  const auto now = h.history().back();
  CheckNeverRestarted(now, pid);
  CHECK(now.state == State::kServing);
}

TEST_CASE("a probe that cannot run here holds the start timeout: it kills only on a real miss") {
  SupervisorOptions options = FastOptions();
  options.start_timeout = milliseconds(200);
  Harness h(options, {"sleep", "1000"}, /*probe_short=*/true);
  const pid_t pid = h.WaitFor([](const SupervisorStatus& s) { return s.pid > 0; }).pid;
  // Many times the start timeout of probes that could not run.
  REQUIRE(testing_support::WaitFor([&] { return h.probes_ >= 60; }, milliseconds(10'000)));
  auto now = h.history().back();
  CHECK(now.pid == pid);
  CHECK(now.state == State::kStarting);
  CHECK_FALSE(now.last_exit.has_value());
  CHECK(Alive(pid));
  // A probe that reaches the child and gets no answer: the timeout applies again.
  h.probe_ok_ = false;
  h.probe_short_ = false;
  const auto killed = h.WaitFor([](const SupervisorStatus& s) { return s.last_exit.has_value(); });
  CHECK(killed.last_exit_description.find("did not answer NFS NULL within") != std::string::npos);
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
  std::ifstream stat("/proc/" + std::to_string(grandchild) + "/stat");
  std::string line;
  std::getline(stat, line);
  kill(grandchild, SIGKILL);
  const pid_t reaped = waitpid(grandchild, nullptr, 0);  // only its parent can reap it
  CHECK(reaped == grandchild);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  char state = 0;
  pid_t ppid = 0;
  rest >> state >> ppid;
  CHECK(ppid == getpid());
}

}  // namespace supervisor
