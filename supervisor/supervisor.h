// Keeps one child (ganesha) serving: spawns it, notices its exit through a
// pidfd, probes it for hangs, restarts it in place with backoff, gives up when
// the death budget is spent, and stops it on SIGTERM/SIGINT. Runs entirely on
// one EventLoop thread. Knows nothing of gRPC or NFS exports.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "base/log_limiter.h"
#include "base/proc.h"
#include "supervisor/child_process.h"
#include "supervisor/event_loop.h"
#include "supervisor/health_state.h"
#include "supervisor/log_forwarder.h"
#include "supervisor/restart_policy.h"
#include "supervisor/worker.h"

namespace supervisor {

// Why a child process ended, as far as the supervisor can tell.
enum class DeathCause {
  kExited,        // exited on its own, with a code
  kSignaled,      // killed by a signal not sent here (a crash, the OOM killer, kill -9)
  kHung,          // SIGKILLed here after probe_failures missed probes in a row
  kStartTimeout,  // SIGKILLed here: no answer within start_timeout of starting
  kMemory,        // SIGKILLed here: resident memory over memory_limit_bytes for too long
  kSpawnFailed,   // could not be started at all
  kStopped,       // ended by Stop() or Fail(): not a death, costs no budget
};

// "exited", "signal", "hung", "start_timeout", "memory", "spawn_failed", "stopped":
// stable words for logs, the status and metric labels.
std::string_view DeathCauseName(DeathCause cause);

// One sample of the running child's usage, taken every probe interval.
struct ChildUsage {
  pid_t pid = 0;
  base::ProcessUsage usage;
  // Samples in a row with resident memory over the limit (0 without a limit).
  int samples_over_limit = 0;
};

struct SupervisorOptions {
  std::vector<std::string> command;
  // The child's own log file, forwarded line by line (empty: none).
  std::string log_file;
  base::Duration probe_interval{1000};
  // Consecutive missed probes that make a running child "hung".
  int probe_failures = 3;
  // How long a new child may take to answer its first probe.
  base::Duration start_timeout{std::chrono::seconds(30)};
  base::Duration stop_timeout{std::chrono::seconds(10)};
  // How long the FAILED status stays readable before Run() ends.
  base::Duration failed_linger{std::chrono::seconds(5)};
  RestartPolicyOptions restart;
  // The child is SIGKILLed and restarted (a death of cause kMemory, against
  // the budget) once its resident memory has been over this many bytes in
  // `memory_limit_samples` samples in a row, one per probe interval: over it
  // for (samples - 1) intervals. 0: no limit.
  uint64_t memory_limit_bytes = 0;
  int memory_limit_samples = 10;
  // How a sample is read: /proc of the child, unless a test scripts it.
  std::function<std::optional<base::ProcessUsage>(pid_t)> read_usage = base::ReadProcessUsage;
};

struct SupervisorStatus {
  State state = State::kStarting;
  std::string reason;
  std::chrono::system_clock::time_point last_transition;
  pid_t pid = 0;
  std::chrono::system_clock::time_point child_started;
  uint32_t restarts = 0;
  std::optional<ChildExit> last_exit;
  DeathCause last_exit_cause = DeathCause::kExited;  // with last_exit
  std::string last_exit_description;
  std::chrono::system_clock::time_point last_exit_at;
  // Children killed for their memory (also counted in deaths and restarts).
  uint32_t memory_kills = 0;
};

enum class Outcome { kStopped, kFailed };

// A death the restart policy counted (not the end of a stop, nor a kill
// that goes with FAILED).
struct Death {
  DeathCause cause = DeathCause::kExited;
  ChildExit exit;  // {127, 0} when it could not be executed
  // When the loop woke up to the exit: the kernel makes the pidfd readable as
  // the process exits, so this is the exit, give or take the loop's latency.
  base::TimePoint noticed{};
  // From `noticed` until the death was reaped and judged (restart or give up).
  base::Clock::duration detection{};
  bool restarting = false;  // false: the death budget is spent (FAILED)
};

// What the supervisor saw, for metrics. Every hook is optional and runs on
// the loop thread; times are the steady clock's, not the injected TimeSource.
struct SupervisorEvents {
  std::function<void(const Death&)> died;
  // A probe of a running ganesha returned after `took`, answered or not
  // (probes that could not run here are not reported).
  std::function<void(base::Clock::duration took, bool answered)> probed;
  // A miss towards a hang: a probe of an answering ganesha that failed, or
  // --probe-failures rounds in a row that could not run here. Failures before
  // the first answer are no misses.
  std::function<void()> missed;
  // A hang was declared: from the moment the first missed probe went out
  // until the decision to kill (a lower bound of the hang's age, by at most
  // one probe interval).
  std::function<void(base::Clock::duration since_first_miss)> hang_detected;
};

class Supervisor {
 public:
  // Runs on a worker thread; must return within `timeout`. ResourceExhausted
  // means this process could not probe at all (out of file descriptors, say,
  // while something floods its ports): no verdict on the child, so no miss,
  // unless it lasts: each probe_interval x probe_failures of it counts as one
  // miss (see HandleProbeResult), and it holds the start timeout for at most
  // another start timeout.
  using Prober = std::function<absl::Status(base::Duration timeout)>;
  // Loop thread; what besides a probe answer makes the share ready.
  using ReadinessCheck = std::function<absl::Status()>;
  using StatusObserver = std::function<void(const SupervisorStatus&)>;
  // Every usage sample of the running child (loop thread). Samples are not
  // status changes: they are never published to status observers.
  using UsageObserver = std::function<void(const ChildUsage&)>;

  Supervisor(EventLoop& loop, SupervisorOptions options, Prober prober, ReadinessCheck ready,
             const base::TimeSource& clock);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // All below: loop thread only.
  void AddStatusObserver(StatusObserver observer) { observers_.push_back(std::move(observer)); }
  struct SpawnHooks {
    // Asked right before every spawn (the first and each restart): false
    // skips it. A gate that says no fails or stops the run itself (e.g. the
    // serving lease ran out: the daemon fences).
    std::function<bool()> may_spawn;
    // Told of every new child right after the spawn, before it runs the
    // program (it is held at its start gate: e.g. a watchdog takes its pidfd
    // first). OK lets it run; an error cancels it (it never runs the
    // program), a failed start like any other.
    std::function<absl::Status(const ChildProcess&)> spawned;
  };
  void SetSpawnHooks(SpawnHooks hooks) { spawn_hooks_ = std::move(hooks); }
  void SetEvents(SupervisorEvents events) { events_ = std::move(events); }
  // Deaths the budget still allows within the window before the next one
  // fails the share: --max-deaths minus the deaths of the last --death-window.
  int DeathBudgetLeft() const;
  void AddUsageObserver(UsageObserver observer) { usage_observers_.push_back(std::move(observer)); }
  // Takes over SIGTERM, SIGINT and SIGCHLD (blocked beforehand by
  // BlockSupervisedSignals) and publishes STARTING with `reason`, without
  // starting the child yet (while the volume is prepared): a SIGTERM then ends
  // the run cleanly, and Fail() fails it. The loop quits once an Outcome is reached.
  // Held already and not started yet, it only publishes the new reason.
  void Hold(std::string reason);
  // Hold (unless held already), then starts the child.
  void Start();
  void Stop(std::string reason);
  enum class StopSignal {
    kTerm,  // SIGTERM, SIGKILL after the stop timeout
    kKill,  // SIGKILL at once, also while stopping: it must stop answering now
  };
  // Gives up for a reason outside ganesha (e.g. the volume cannot be repaired,
  // the serving lease is lost): FAILED, ganesha stopped, the run ends after
  // the linger.
  void Fail(std::string reason, StopSignal how = StopSignal::kTerm);
  void SignalChild(int sig);
  // Tells ganesha to reread ganesha.conf (SIGHUP). A ganesha that has not
  // answered a probe yet may not have its signal thread up, and SIGHUP's
  // default action would kill it (a burst of Mount/Unmount did, restart after
  // restart, until the death budget was spent): it gets the SIGHUP once it
  // answers, since it may have read the file before the change.
  void Reload();
  // Re-evaluates readiness now (e.g. after the export changed).
  void Reevaluate();
  // Probes at the start-up cadence for a short while (until the share is ready
  // again): after ganesha was told to reread its exports, the next probe shows
  // the export within milliseconds instead of a probe interval later.
  void ProbeSoon();

  std::optional<Outcome> outcome() const { return outcome_; }
  const SupervisorStatus& status() const { return status_; }

 private:
  void SpawnChild();
  // A child spawned held: the spawned hook is told of it, then it runs the
  // program, or (the hook refused, or it died at its gate meanwhile) it is
  // reaped, its exit in `exited`.
  absl::StatusOr<ChildProcess> Admit(ChildProcess child, ChildExit& exited);
  void OnChildExit();
  void OnChildOutput();
  void OnSignal();
  void ReapOrphans();
  void OnProbeTimer();
  // `sent`: when that probe went out (steady clock), for events_.
  void OnProbeResult(uint64_t instance, base::TimePoint sent, absl::Status result);
  void HandleProbeResult(uint64_t instance, base::TimePoint sent, absl::Status result);
  // A probe missed (`last` says why; `sent`: when it went out); probe_failures
  // in a row kill the child.
  void CountMiss(const std::string& last, base::TimePoint sent);
  void Kill(DeathCause cause, std::string reason);
  void ReportDeath(DeathCause cause, const ChildExit& exit, base::TimePoint noticed,
                   bool restarting);
  // Reads the child's usage, tells the usage observers, enforces the memory limit.
  void SampleUsage();
  // Back to probe_interval once a ProbeSoon window is over.
  void EndFastWindowIfDue();
  void Finish(Outcome outcome);
  void Publish();
  void Unwatch(uint64_t& token);

  EventLoop& loop_;
  SupervisorOptions options_;
  Prober prober_;
  ReadinessCheck ready_;
  const base::TimeSource& clock_;
  RestartPolicy policy_;
  HealthStateMachine machine_;
  SupervisorStatus status_;
  std::vector<StatusObserver> observers_;
  SpawnHooks spawn_hooks_;
  SupervisorEvents events_;
  std::vector<UsageObserver> usage_observers_;

  std::optional<ChildProcess> child_;
  uint64_t instance_ = 0;  // counts spawns; stale probe results are ignored
  uint64_t pidfd_token_ = 0;
  uint64_t output_token_ = 0;
  uint64_t signal_token_ = 0;
  base::UniqueFd signal_fd_;
  std::optional<LineLogger> output_;
  std::optional<LogFileFollower> log_file_;
  bool answered_ = false;
  bool reload_pending_ = false;  // Reload before the child answered
  bool probe_pending_ = false;
  int misses_ = 0;
  // The last probe could not run here (ResourceExhausted): the start timeout
  // waits for a probe that can tell (for at most another start timeout).
  bool probe_short_ = false;
  // Since when probes in a row could not run here, and the misses counted for it so far.
  std::optional<base::TimePoint> short_since_;
  int64_t short_misses_ = 0;
  base::LogLimiter probe_short_log_;
  std::string last_probe_error_;
  std::string kill_reason_;
  DeathCause kill_cause_ = DeathCause::kSignaled;  // with kill_reason_
  // When the first of the current run of missed probes went out (steady
  // clock, for events_).
  base::TimePoint first_miss_sent_{};
  int samples_over_limit_ = 0;
  base::TimePoint start_deadline_{};
  std::optional<base::TimePoint> fast_until_;
  std::optional<Outcome> outcome_;
  bool held_ = false;

  Timer probe_timer_;
  // Usage samples, every probe interval while a child runs.
  Timer usage_timer_;
  Timer restart_timer_;
  Timer stop_timer_;
  Timer linger_timer_;
  // Probes run here so a slow one never blocks the loop; one at a time.
  Worker probe_worker_;
};

// Blocks SIGTERM, SIGINT and SIGCHLD in the calling thread, and so in every
// thread it creates afterwards: call first thing in main, before any thread starts.
void BlockSupervisedSignals();

// Makes this process the reaper of orphaned descendants (unless it is PID 1,
// which already is), so no zombie outlives its parent.
void BecomeSubreaper();

}  // namespace supervisor
