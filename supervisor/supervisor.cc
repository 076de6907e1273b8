#include "supervisor/supervisor.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>

#include "absl/strings/str_cat.h"
#include "base/byte_size.h"
#include "base/fmt_absl.h"
#include "base/json_log.h"

namespace supervisor {
namespace {

// While a new child has not answered yet, probe often: readiness should follow
// ganesha's start-up within milliseconds, not a whole probe interval.
constexpr base::Duration kStartupProbeInterval{10};
// How long ProbeSoon keeps that cadence while the share is not ready.
constexpr base::Duration kProbeSoonWindow{2000};
// A probe that cannot run here is logged at most this often.
constexpr base::Duration kProbeShortLogPeriod{30'000};

sigset_t SupervisedSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGCHLD);
  return set;
}

}  // namespace

std::string_view DeathCauseName(DeathCause cause) {
  switch (cause) {
    case DeathCause::kExited:
      return "exited";
    case DeathCause::kSignaled:
      return "signal";
    case DeathCause::kHung:
      return "hung";
    case DeathCause::kStartTimeout:
      return "start_timeout";
    case DeathCause::kMemory:
      return "memory";
    case DeathCause::kSpawnFailed:
      return "spawn_failed";
    case DeathCause::kStopped:
      return "stopped";
  }
  return "unknown";
}

void BlockSupervisedSignals() {
  const sigset_t set = SupervisedSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void BecomeSubreaper() {
  if (getpid() != 1) prctl(PR_SET_CHILD_SUBREAPER, 1);
}

Supervisor::Supervisor(EventLoop& loop, SupervisorOptions options, Prober prober,
                       ReadinessCheck ready, const base::TimeSource& clock)
    : loop_(loop),
      options_(std::move(options)),
      prober_(std::move(prober)),
      ready_(std::move(ready)),
      clock_(clock),
      policy_(options_.restart),
      probe_short_log_(kProbeShortLogPeriod, clock),
      probe_timer_(loop, [this] { OnProbeTimer(); }),
      usage_timer_(loop, [this] { SampleUsage(); }),
      restart_timer_(loop, [this] { SpawnChild(); }),
      stop_timer_(loop,
                  [this] {
                    spdlog::warn("ganesha did not stop within {}; sending SIGKILL",
                                 base::FormatDuration(options_.stop_timeout));
                    SignalChild(SIGKILL);
                  }),
      linger_timer_(loop, [this] { Finish(Outcome::kFailed); }),
      probe_worker_(loop) {
  status_.state = machine_.state();
  status_.reason = machine_.reason();
  status_.last_transition = std::chrono::system_clock::now();
  machine_.AddObserver([this](const Transition& t) {
    status_.state = t.to;
    status_.reason = t.reason;
    status_.last_transition = std::chrono::system_clock::now();
  });
}

Supervisor::~Supervisor() {
  Unwatch(pidfd_token_);
  Unwatch(output_token_);
  Unwatch(signal_token_);
  if (child_) {
    child_->SignalGroup(SIGKILL);
    waitpid(child_->pid(), nullptr, 0);
  }
}

void Supervisor::Unwatch(uint64_t& token) {
  if (token != 0) loop_.Unwatch(token);
  token = 0;
}

void Supervisor::Hold(std::string reason) {
  if (held_) {
    // Held for one reason (waiting for the serving lease), now for the next
    // (preparing the volume).
    if (!reason.empty() && !child_ && status_.state == State::kStarting) {
      status_.reason = std::move(reason);
      Publish();
    }
    return;
  }
  held_ = true;
  const sigset_t set = SupervisedSignals();
  signal_fd_.reset(signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (signal_fd_) {
    signal_token_ = loop_.Watch(signal_fd_.get(), EPOLLIN, [this](uint32_t) { OnSignal(); });
  } else {
    spdlog::error("signalfd failed: {}; SIGTERM will not stop ganesha cleanly",
                  std::strerror(errno));
  }
  if (!options_.log_file.empty()) {
    log_file_.emplace(loop_, options_.log_file, spdlog::get("ganesha"));
  }
  if (!reason.empty()) status_.reason = std::move(reason);
  Publish();
}

void Supervisor::Start() {
  Hold("");
  if (status_.state == State::kStarting) {
    status_.reason = machine_.reason();
    Publish();
  }
  SpawnChild();
}

void Supervisor::Publish() {
  for (const auto& observer : observers_) observer(status_);
}

void Supervisor::SpawnChild() {
  if (outcome_ || status_.state == State::kStopping || status_.state == State::kFailed) return;
  // The gate may fail the run itself (it returns false then): nothing more here.
  if (spawn_hooks_.may_spawn && !spawn_hooks_.may_spawn()) return;
  auto child = ChildProcess::Spawn(options_.command, SIGKILL, /*stdin_fd=*/-1,
                                   spawn_hooks_.spawned ? StartGate::kHeld : StartGate::kOpen);
  // A child that never ran ganesha: as it exits when it cannot exec, unless
  // it was admitted and exited otherwise.
  ChildExit never_ran{.code = 127};
  if (child.ok() && spawn_hooks_.spawned) child = Admit(*std::move(child), never_ran);
  const base::TimePoint now = clock_.Now();
  policy_.OnStart(now);
  if (!child.ok()) {
    spdlog::error("cannot start ganesha: {}", child.status().message());
    status_.last_exit = never_ran;
    status_.last_exit_cause = DeathCause::kSpawnFailed;
    status_.last_exit_description = std::string(child.status().message());
    status_.last_exit_at = std::chrono::system_clock::now();
    // A spawn failure costs a death, so a missing binary ends in FAILED, not a loop.
    child_.reset();
    instance_++;
    kill_reason_.clear();
    const auto decision = policy_.OnDeath(now);
    ReportDeath(DeathCause::kSpawnFailed, *status_.last_exit, base::Clock::now(),
                !decision.give_up);
    if (decision.give_up) {
      machine_.TransitionTo(State::kFailed,
                            absl::StrCat("cannot start ganesha: ", child.status().message()));
      Publish();
      linger_timer_.Arm(options_.failed_linger);
      return;
    }
    machine_.TransitionTo(State::kDegraded,
                          absl::StrCat("cannot start ganesha: ", child.status().message()));
    Publish();
    restart_timer_.Arm(decision.delay);
    return;
  }
  child_ = std::move(*child);
  instance_++;
  answered_ = false;
  reload_pending_ = false;  // a new child reads the configuration as it is now
  misses_ = 0;
  probe_short_ = false;
  short_since_.reset();
  short_misses_ = 0;
  kill_reason_.clear();
  samples_over_limit_ = 0;
  start_deadline_ = now + options_.start_timeout;
  status_.pid = child_->pid();
  status_.child_started = std::chrono::system_clock::now();
  const base::LogFields fields({{"pid", int64_t{child_->pid()}}});
  spdlog::info("started ganesha pid {}", child_->pid());
  if (status_.state == State::kDegraded) {
    status_.reason =
        absl::StrCat("ganesha restarted as pid ", child_->pid(),
                     ", waiting for it to answer (previous ", status_.last_exit_description, ")");
  }
  output_.emplace(spdlog::get("ganesha"));
  pidfd_token_ = loop_.Watch(child_->pidfd(), EPOLLIN, [this](uint32_t) { OnChildExit(); });
  output_token_ = loop_.Watch(child_->output_fd(), EPOLLIN, [this](uint32_t) { OnChildOutput(); });
  probe_timer_.ArmPeriodic(kStartupProbeInterval);
  usage_timer_.ArmPeriodic(options_.probe_interval);
  Publish();
  OnProbeTimer();
}

absl::StatusOr<ChildProcess> Supervisor::Admit(ChildProcess child, ChildExit& exited) {
  absl::Status admitted = spawn_hooks_.spawned(child);
  if (!admitted.ok()) {
    const pid_t pid = child.pid();
    if (auto cancelled = child.Cancel(); cancelled.ok()) {
      exited = *cancelled;
    } else {
      spdlog::error("cancelling ganesha pid {}: {}", pid, cancelled.status().message());
    }
    return admitted;
  }
  if (auto released = child.Release(&exited); !released.ok()) return released;
  return child;
}

void Supervisor::OnChildOutput() {
  char buf[4096];
  ssize_t n;
  while (child_ && (n = read(child_->output_fd(), buf, sizeof(buf))) > 0) {
    output_->Append(std::string_view(buf, static_cast<size_t>(n)));
  }
}

void Supervisor::OnChildExit() {
  // The pidfd woke this loop turn: its wake-up is when the exit was reported.
  const base::TimePoint noticed = loop_.last_tick();
  OnChildOutput();
  output_->Flush();
  if (log_file_) log_file_->Drain();
  auto exit = child_->Reap();
  if (!exit.ok()) {
    spdlog::error("reaping ganesha pid {}: {}", child_->pid(), exit.status().message());
    return;
  }
  Unwatch(pidfd_token_);
  Unwatch(output_token_);
  probe_timer_.Disarm();
  usage_timer_.Disarm();
  const pid_t pid = status_.pid;
  child_.reset();
  status_.pid = 0;
  status_.last_exit = *exit;
  if (status_.state == State::kStopping || status_.state == State::kFailed) {
    status_.last_exit_cause = DeathCause::kStopped;
  } else if (!kill_reason_.empty()) {
    status_.last_exit_cause = kill_cause_;
  } else {
    status_.last_exit_cause = exit->signal != 0 ? DeathCause::kSignaled : DeathCause::kExited;
  }
  if (status_.last_exit_cause == DeathCause::kMemory) status_.memory_kills++;
  const base::LogFields fields({{"pid", int64_t{pid}},
                                {"cause", std::string(DeathCauseName(status_.last_exit_cause))},
                                {"exit_code", int64_t{exit->code}},
                                {"signal", int64_t{exit->signal}}});
  status_.last_exit_description =
      kill_reason_.empty() ? exit->Describe() : absl::StrCat(kill_reason_, "; ", exit->Describe());
  status_.last_exit_at = std::chrono::system_clock::now();
  ReapOrphans();  // orphans queued behind the child's zombie

  if (status_.state == State::kStopping) {
    spdlog::info("ganesha pid {} {}", pid, exit->Describe());
    stop_timer_.Disarm();
    Publish();
    Finish(Outcome::kStopped);
    return;
  }
  if (status_.state == State::kFailed) {
    Publish();  // pid 0: nothing reads the dead ganesha's /proc any more
    return;
  }
  const auto decision = policy_.OnDeath(clock_.Now());
  ReportDeath(status_.last_exit_cause, *exit, noticed, !decision.give_up);
  if (decision.give_up) {
    machine_.TransitionTo(
        State::kFailed,
        absl::StrCat("ganesha pid ", pid, " ", status_.last_exit_description, "; ",
                     decision.deaths_in_window, " deaths within ",
                     base::FormatDuration(options_.restart.death_window), " exceed the budget of ",
                     options_.restart.max_deaths, "; giving up"));
    Publish();
    linger_timer_.Arm(options_.failed_linger);
    return;
  }
  const std::string reason = absl::StrCat(
      "ganesha pid ", pid, " ", status_.last_exit_description, "; restarting",
      decision.delay.count() > 0 ? absl::StrCat(" in ", base::FormatDuration(decision.delay))
                                 : std::string(" now"));
  if (!machine_.TransitionTo(State::kDegraded, reason)) status_.reason = reason;
  status_.restarts++;
  Publish();
  restart_timer_.Arm(decision.delay);
}

void Supervisor::ReportDeath(DeathCause cause, const ChildExit& exit, base::TimePoint noticed,
                             bool restarting) {
  if (!events_.died) return;
  events_.died(Death{.cause = cause,
                     .exit = exit,
                     .noticed = noticed,
                     .detection = base::Clock::now() - noticed,
                     .restarting = restarting});
}

int Supervisor::DeathBudgetLeft() const {
  return std::max(0, options_.restart.max_deaths - policy_.DeathsInWindow(clock_.Now()));
}

void Supervisor::OnSignal() {
  signalfd_siginfo info{};
  while (read(signal_fd_.get(), &info, sizeof(info)) == sizeof(info)) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) {
      ReapOrphans();
    } else {
      Stop(absl::StrCat("received ", sigabbrev_np(sig) ? "SIG" : "", sigabbrev_np(sig)));
    }
  }
}

void Supervisor::ReapOrphans() {
  for (;;) {
    // Peek first: processes we spawned (ganesha, helper programs run by other
    // threads) are reaped by their owners through their pidfds, not here.
    absl::MutexLock lock(&ChildProcess::SpawnMutex());
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
    if (ChildProcess::IsOwned(info.si_pid)) return;
    waitpid(info.si_pid, nullptr, WNOHANG);
    spdlog::debug("reaped orphan pid {}", info.si_pid);
  }
}

void Supervisor::OnProbeTimer() {
  // Orphans whose exit was queued behind a helper's zombie are picked up here.
  ReapOrphans();
  // Killed already (its exit is on the way): no more probes, and above all no
  // second kill that would relabel the death's cause.
  if (!child_ || !kill_reason_.empty()) return;
  // A probe that could not run at the deadline holds it, for at most
  // another start timeout: a lasting shortage here must not shield a ganesha
  // that never starts answering.
  if (!answered_ && clock_.Now() > start_deadline_ &&
      (!probe_short_ || clock_.Now() > start_deadline_ + options_.start_timeout)) {
    Kill(DeathCause::kStartTimeout,
         absl::StrCat("ganesha did not answer NFS NULL within ",
                      base::FormatDuration(options_.start_timeout), " of starting",
                      probe_short_
                          ? absl::StrCat(", nor ", base::FormatDuration(options_.start_timeout),
                                         " later while probes could not run here")
                          : "",
                      " (last: ", last_probe_error_, ")"));
    return;
  }
  // A probe still in flight (waiting out its timeout) runs again as soon as it
  // returns, so a hung child is missed once per interval, not every other one.
  const uint64_t instance = instance_;
  // Carried with the result: another probe may start before this one's result
  // is handled.
  const base::TimePoint sent = base::Clock::now();
  probe_pending_ = !probe_worker_.TryRun(
      [prober = prober_, timeout = options_.probe_interval] { return prober(timeout); },
      [this, instance, sent](absl::Status result) {
        OnProbeResult(instance, sent, std::move(result));
      });
}

void Supervisor::OnProbeResult(uint64_t instance, base::TimePoint sent, absl::Status result) {
  HandleProbeResult(instance, sent, std::move(result));
  if (probe_pending_ && child_ && kill_reason_.empty()) OnProbeTimer();
}

void Supervisor::HandleProbeResult(uint64_t instance, base::TimePoint sent, absl::Status result) {
  if (instance != instance_ || !child_ || !kill_reason_.empty()) return;
  if (status_.state == State::kStopping || status_.state == State::kFailed) return;
  // Out of descriptors or memory here (a flood on our own ports, say): the
  // probe never reached the child. Killing it for a passing shortage would fix
  // nothing and cost the share its NFS server, so such a round is no miss. But
  // a shortage that lasts (a descriptor leak here) must not shield a hung
  // ganesha for ever: each probe_interval x probe_failures of it, timed from
  // its first round, counts as one miss. Timed, not counted in rounds: after
  // ProbeSoon the rounds come every few milliseconds, and a brief shortage
  // then must not add up to a kill.
  probe_short_ = result.code() == absl::StatusCode::kResourceExhausted;
  if (probe_short_) {
    const auto now = clock_.Now();
    if (!short_since_) short_since_ = now;
    last_probe_error_ = absl::StrCat("could not probe here: ", result.message());
    EndFastWindowIfDue();
    const auto per_miss = options_.probe_interval * options_.probe_failures;
    const auto lasted = now - *short_since_;
    if (!answered_ || lasted / per_miss <= short_misses_) {
      if (auto held_back = probe_short_log_.Admit()) {
        spdlog::warn("NFS NULL probe could not run ({} of it counts as a miss): {}{}",
                     base::FormatDuration(per_miss), result.message(),
                     base::LogLimiter::HeldBack(*held_back));
      }
      return;
    }
    ++short_misses_;
    CountMiss(absl::StrCat("probes could not run here for ",
                           base::FormatDuration(std::chrono::floor<base::Duration>(lasted)), ": ",
                           result.message()),
              sent);
    return;
  }
  short_since_.reset();
  short_misses_ = 0;
  if (events_.probed) events_.probed(base::Clock::now() - sent, result.ok());
  if (!result.ok()) {
    last_probe_error_ = std::string(result.message());
    if (!answered_) return;  // still starting; the start timeout bounds this
    CountMiss(std::string(result.message()), sent);
    return;
  }
  if (misses_ > 0) spdlog::info("NFS NULL probe answered again after {} misses", misses_);
  misses_ = 0;
  if (!answered_) {
    answered_ = true;
    spdlog::info("ganesha pid {} answers NFS NULL", child_->pid());
    if (reload_pending_) {
      // Harmless when this child was started after the change: one reread more.
      reload_pending_ = false;
      child_->SignalGroup(SIGHUP);
    }
    probe_timer_.ArmPeriodic(options_.probe_interval);
    // Its usage is in the status from the moment it serves; samples follow a
    // probe interval apart from here.
    usage_timer_.ArmPeriodic(options_.probe_interval);
    SampleUsage();
    if (!kill_reason_.empty()) return;  // over its memory limit already
  }
  Reevaluate();
  EndFastWindowIfDue();
}

void Supervisor::EndFastWindowIfDue() {
  // A ProbeSoon window ends when the share is ready again, or after its time.
  if (fast_until_ && (status_.state == State::kServing || clock_.Now() >= *fast_until_)) {
    fast_until_.reset();
    probe_timer_.ArmPeriodic(options_.probe_interval);
  }
}

void Supervisor::CountMiss(const std::string& last, base::TimePoint sent) {
  if (++misses_ == 1) first_miss_sent_ = sent;
  spdlog::warn("NFS NULL probe missed ({}/{}): {}", misses_, options_.probe_failures, last);
  if (events_.missed) events_.missed();
  if (misses_ >= options_.probe_failures) {
    if (events_.hang_detected) events_.hang_detected(base::Clock::now() - first_miss_sent_);
    Kill(DeathCause::kHung,
         absl::StrCat("hung: ", misses_, " NFS NULL probes missed in a row (last: ", last, ")"));
  }
}

void Supervisor::ProbeSoon() {
  if (!child_ || !answered_ || !kill_reason_.empty()) return;
  fast_until_ = clock_.Now() + kProbeSoonWindow;
  probe_timer_.ArmPeriodic(kStartupProbeInterval);
  OnProbeTimer();
}

void Supervisor::Reevaluate() {
  if (!child_ || !answered_ || !kill_reason_.empty()) return;
  const absl::Status ready = ready_();
  if (ready.ok()) {
    if (machine_.TransitionTo(State::kServing, "ganesha answers NFS and the export is ready")) {
      Publish();
    }
    return;
  }
  const std::string reason(ready.message());
  if (machine_.TransitionTo(State::kDegraded, reason)) {
    Publish();
  } else if (status_.state == State::kDegraded && status_.reason != reason) {
    status_.reason = reason;
    Publish();
  }
}

void Supervisor::SampleUsage() {
  if (!child_ || !kill_reason_.empty()) return;
  const pid_t pid = child_->pid();
  const auto usage = options_.read_usage(pid);
  if (!usage) return;  // exiting: its pidfd tells
  const uint64_t limit = options_.memory_limit_bytes;
  const base::LogFields fields(
      {{"pid", int64_t{pid}}, {"rss_bytes", usage->rss_bytes}, {"memory_limit_bytes", limit}});
  if (limit > 0 && usage->rss_bytes > limit) {
    ++samples_over_limit_;
    if (samples_over_limit_ == 1) {
      spdlog::warn(
          "ganesha pid {} uses {} of memory (RSS), over the limit of {}: restarted when it stays "
          "over for {} samples ({})",
          pid, base::FormatBytes(usage->rss_bytes), base::FormatBytes(limit),
          options_.memory_limit_samples,
          base::FormatDuration(options_.probe_interval * (options_.memory_limit_samples - 1)));
    }
  } else if (samples_over_limit_ > 0) {
    spdlog::info("ganesha pid {} memory back under the limit: {} of {} (RSS)", pid,
                 base::FormatBytes(usage->rss_bytes), base::FormatBytes(limit));
    samples_over_limit_ = 0;
  }
  const ChildUsage sample{.pid = pid, .usage = *usage, .samples_over_limit = samples_over_limit_};
  for (const auto& observer : usage_observers_) observer(sample);
  if (limit > 0 && samples_over_limit_ >= options_.memory_limit_samples) {
    Kill(DeathCause::kMemory,
         absl::StrCat("memory: RSS ", base::FormatBytes(usage->rss_bytes), " over the limit of ",
                      base::FormatBytes(limit), " in ", samples_over_limit_, " samples in a row"));
  }
}

void Supervisor::Kill(DeathCause cause, std::string reason) {
  // One kill per child: the first cause is the death's cause.
  if (!child_ || !kill_reason_.empty()) return;
  // Signalled before the synchronous log, as in Fail: a full stderr must not
  // hold the kill.
  child_->SignalGroup(SIGKILL);
  const base::LogFields fields(
      {{"pid", int64_t{child_->pid()}}, {"cause", std::string(DeathCauseName(cause))}});
  spdlog::error("killing ganesha pid {}: {}", child_->pid(), reason);
  kill_reason_ = std::move(reason);
  kill_cause_ = cause;
  if (machine_.TransitionTo(State::kDegraded, kill_reason_)) Publish();
}

void Supervisor::SignalChild(int sig) {
  if (child_) child_->SignalGroup(sig);
}

void Supervisor::Reload() {
  if (!child_ || !kill_reason_.empty()) return;
  if (!answered_) {
    reload_pending_ = true;
    return;
  }
  child_->SignalGroup(SIGHUP);
}

void Supervisor::Stop(std::string reason) {
  if (outcome_ || status_.state == State::kStopping) return;
  const bool failed = status_.state == State::kFailed;
  machine_.TransitionTo(State::kStopping, std::move(reason));
  Publish();
  restart_timer_.Disarm();
  probe_timer_.Disarm();
  usage_timer_.Disarm();
  linger_timer_.Disarm();
  if (!child_) {
    Finish(failed ? Outcome::kFailed : Outcome::kStopped);
    return;
  }
  spdlog::info("stopping ganesha pid {} (SIGTERM, SIGKILL after {})", child_->pid(),
               base::FormatDuration(options_.stop_timeout));
  child_->SignalGroup(SIGTERM);
  child_->SignalGroup(SIGCONT);  // a stopped (hung) ganesha cannot act on SIGTERM otherwise
  stop_timer_.Arm(options_.stop_timeout);
}

void Supervisor::Fail(std::string reason, StopSignal how) {
  if (how == StopSignal::kKill && child_) {
    // Before anything else, and whatever the state: a graceful stop under
    // way must not keep it answering for its stop timeout. Logged only after
    // the signal is sent: the log is written synchronously, and a full stderr
    // pipe must not hold the kill.
    child_->SignalGroup(SIGKILL);
    spdlog::error("SIGKILL to ganesha pid {}: {}", child_->pid(), reason);
  }
  if (outcome_ || status_.state == State::kFailed || status_.state == State::kStopping) return;
  machine_.TransitionTo(State::kFailed, std::move(reason));
  Publish();
  restart_timer_.Disarm();
  probe_timer_.Disarm();
  usage_timer_.Disarm();
  if (child_ && how == StopSignal::kTerm) {
    child_->SignalGroup(SIGTERM);
    child_->SignalGroup(SIGCONT);
    stop_timer_.Arm(options_.stop_timeout);
  }
  linger_timer_.Arm(options_.failed_linger);
}

void Supervisor::Finish(Outcome outcome) {
  if (outcome_) return;
  outcome_ = outcome;
  loop_.Quit();
}

}  // namespace supervisor
