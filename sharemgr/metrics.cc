#include "sharemgr/metrics.h"

#include <array>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/proc.h"

namespace sharemgr {
namespace {

using metrics::Seconds;
using prometheus::Histogram;
using supervisor::State;

// Bucket bounds, in seconds, around what each measures: a pidfd notices an
// exit within milliseconds; a restart serves again in tens of them; a hang
// is declared after --probe-interval x --probe-failures (3 s by default); a
// probe answers in well under a millisecond on a healthy node; an fsck takes
// minutes on a big volume.
const Histogram::BucketBoundaries kDetectionBuckets = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                                       0.05,   0.1,   0.25,  0.5,   1};
const Histogram::BucketBoundaries kRecoveryBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                      1,    2.5,   5,    10,  30,   60};
const Histogram::BucketBoundaries kHangBuckets = {0.25, 0.5, 1, 2, 3, 4, 5, 7.5, 10, 15, 30, 60};
const Histogram::BucketBoundaries kProbeBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
const Histogram::BucketBoundaries kRepairBuckets = {0.01, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                                    5,    10,   30,  60,   300, 1800};
const Histogram::BucketBoundaries kVolumeOpBuckets = {0.01, 0.05, 0.1, 0.5, 1,   2.5,
                                                      5,    10,   30,  60,  300, 600};
const Histogram::BucketBoundaries kRpcBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10};

const char* RepairKindLabel(RepairKind kind) {
  return kind == RepairKind::kRemount ? "remount" : "full";
}

const char* RepairOutcomeLabel(RepairOutcome outcome) {
  switch (outcome) {
    case RepairOutcome::kOk:
      return "ok";
    case RepairOutcome::kFailed:
      return "failed";
    case RepairOutcome::kNotRun:
      return "not_run";
  }
  return "unknown";
}

const char* VolumeOpLabel(VolumeOp op) { return op == VolumeOp::kTrim ? "trim" : "resize"; }

std::vector<prometheus::ClientMetric> NoSamples() { return {}; }

}  // namespace

std::string ShareMetrics::DeathCauseLabel(const supervisor::Death& death) {
  switch (death.cause) {
    case supervisor::DeathCause::kExited:
      return absl::StrCat("exit_", death.exit.code);
    case supervisor::DeathCause::kSignaled:
      return absl::StrCat("signal_", death.exit.signal);
    case supervisor::DeathCause::kHung:
      return "hang";
    case supervisor::DeathCause::kStartTimeout:
      return "start_timeout";
    case supervisor::DeathCause::kMemory:
    case supervisor::DeathCause::kSpawnFailed:
    case supervisor::DeathCause::kStopped:  // never a counted death; named for completeness
      return std::string(supervisor::DeathCauseName(death.cause));
  }
  return "unknown";
}

ShareMetrics::ShareMetrics(uint64_t ganesha_memory_limit_bytes)
    : catalogue_(std::make_shared<metrics::Catalogue>()),
      state_(
          catalogue_->AddGauge("sharemgr_share_state",
                               "1 for the share's current state (label state), 0 for the others")),
      restarts_(catalogue_
                    ->AddCounter("sharemgr_ganesha_restarts_total",
                                 "ganesha restarts in place after a death")
                    .Add({})),
      deaths_(catalogue_->AddCounter(
          "sharemgr_ganesha_deaths_total",
          "ganesha deaths the restart policy counted, by cause: "
          "exit_<code>, signal_<n>, hang, start_timeout, memory, spawn_failed")),
      death_budget_left_(
          catalogue_
              ->AddGauge("sharemgr_ganesha_death_budget_remaining",
                         "deaths still restarted within --death-window; at 0 the next one fails "
                         "the share")
              .Add({})),
      crash_detection_(catalogue_
                           ->AddHistogram("sharemgr_ganesha_crash_detection_seconds",
                                          "from ganesha's exit (its pidfd waking the loop) to the "
                                          "death reaped and judged; exits and outside signals")
                           .Add({}, kDetectionBuckets)),
      crash_to_serving_(catalogue_
                            ->AddHistogram("sharemgr_ganesha_crash_to_serving_seconds",
                                           "from ganesha's death (any cause) to SERVING again, "
                                           "per recovery")
                            .Add({}, kRecoveryBuckets)),
      hang_detection_(catalogue_
                          ->AddHistogram("sharemgr_ganesha_hang_detection_seconds",
                                         "from the first missed NULL probe's send to the hang "
                                         "declared (ganesha then SIGKILLed)")
                          .Add({}, kHangBuckets)),
      probe_duration_(catalogue_
                          ->AddHistogram("sharemgr_ganesha_probe_duration_seconds",
                                         "round trip of answered probes (NFS NULL, then a "
                                         "LOOKUP of the export)")
                          .Add({}, kProbeBuckets)),
      probe_misses_(catalogue_
                        ->AddCounter("sharemgr_ganesha_probe_misses_total",
                                     "misses towards a hang: probes of an answering ganesha that "
                                     "failed, or --probe-failures in a row that could not run")
                        .Add({})),
      read_only_flips_(catalogue_
                           ->AddCounter("sharemgr_volume_read_only_flips_total",
                                        "times the volume turned read-only (a read-only remount "
                                        "or a filesystem error)")
                           .Add({})),
      repairs_(catalogue_->AddCounter(
          "sharemgr_volume_repairs_total",
          "volume repairs by kind (remount, full) and outcome (ok, failed, not_run)")),
      repair_duration_(
          catalogue_->AddHistogram("sharemgr_volume_repair_duration_seconds",
                                   "from a repair's request to its end, by kind (remount, full)")),
      volume_ops_(catalogue_->AddCounter("sharemgr_volume_operations_total",
                                         "FilesystemTrim and FilesystemResize calls by op (trim, "
                                         "resize) and outcome (ok, error)")),
      volume_op_duration_(
          catalogue_->AddHistogram("sharemgr_volume_operation_duration_seconds",
                                   "trim and resize calls' duration, waiting for their turn "
                                   "included, by op")),
      rpc_calls_(catalogue_->AddCounter(
          "sharemgr_grpc_calls_total",
          "gRPC calls answered on --listen and --socket, by method and status code")),
      rpc_duration_(catalogue_->AddHistogram(
          "sharemgr_grpc_call_duration_seconds",
          "gRPC calls' duration by method (a WatchStatus stream: its whole life)")) {
  last_transition_ = base::Clock::now();
  for (size_t i = 0; i < kStates.size(); ++i) {
    state_gauges_[i] = &state_.Add({{"state", std::string(supervisor::StateName(kStates[i]))}});
    state_gauges_[i]->Set(kStates[i] == State::kStarting ? 1 : 0);
  }
  // No sample without a limit: a 0 drawn beside the RSS would read as one.
  auto& memory_limit = catalogue_->AddGauge(
      "sharemgr_ganesha_memory_limit_bytes",
      "--ganesha-memory-limit: ganesha is restarted (a death of cause memory) when its resident "
      "memory stays over it for --ganesha-memory-grace; no sample when off");
  if (ganesha_memory_limit_bytes > 0) {
    memory_limit.Add({}).Set(static_cast<double>(ganesha_memory_limit_bytes));
  }
  for (RepairKind kind : {RepairKind::kRemount, RepairKind::kFull}) {
    repair_duration_.Add({{"kind", RepairKindLabel(kind)}}, kRepairBuckets);
    for (RepairOutcome outcome :
         {RepairOutcome::kOk, RepairOutcome::kFailed, RepairOutcome::kNotRun}) {
      repairs_.Add({{"kind", RepairKindLabel(kind)}, {"outcome", RepairOutcomeLabel(outcome)}});
    }
  }
  for (VolumeOp op : {VolumeOp::kTrim, VolumeOp::kResize}) {
    volume_op_duration_.Add({{"op", VolumeOpLabel(op)}}, kVolumeOpBuckets);
    for (const char* outcome : {"ok", "error"}) {
      volume_ops_.Add({{"op", VolumeOpLabel(op)}, {"outcome", outcome}});
    }
  }
  catalogue_->AddScraped(
      "sharemgr_share_seconds_since_last_transition",
      "seconds since the share's state last changed", prometheus::MetricType::Gauge, [this] {
        absl::MutexLock lock(&mu_);
        return std::vector{metrics::GaugeSample(Seconds(base::Clock::now() - last_transition_))};
      });

  // ganesha's own process, read from /proc when scraped: always current, and
  // nothing is spent on it between scrapes. No samples while none runs. (Its
  // pid is held by its zombie until reaped, and cleared by the status that
  // follows the reap: only in between could a scrape read a reused pid.)
  // Read outside mu_: /proc of a ganesha with many descriptors is slow to
  // list, and the loop's status and every RPC's count take mu_.
  auto usage = [this]() -> std::optional<base::ProcessUsage> {
    pid_t pid = 0;
    {
      absl::MutexLock lock(&mu_);
      pid = ganesha_pid_;
    }
    if (pid == 0) return std::nullopt;
    return base::ReadProcessUsage(pid);
  };
  auto ganesha_family = [this, usage](const std::string& name, const std::string& help,
                                      prometheus::MetricType type,
                                      std::function<double(const base::ProcessUsage&)> value) {
    catalogue_->AddScraped(name, help, type, [usage, type, value] {
      const auto u = usage();
      if (!u) return NoSamples();
      return std::vector{type == prometheus::MetricType::Counter ? metrics::CounterSample(value(*u))
                                                                 : metrics::GaugeSample(value(*u))};
    });
  };
  ganesha_family("sharemgr_ganesha_resident_memory_bytes", "ganesha's resident set size",
                 prometheus::MetricType::Gauge,
                 [](const base::ProcessUsage& u) { return static_cast<double>(u.rss_bytes); });
  ganesha_family("sharemgr_ganesha_open_fds", "ganesha's open file descriptors",
                 prometheus::MetricType::Gauge,
                 [](const base::ProcessUsage& u) { return static_cast<double>(u.open_fds); });
  ganesha_family("sharemgr_ganesha_threads", "ganesha's threads", prometheus::MetricType::Gauge,
                 [](const base::ProcessUsage& u) { return static_cast<double>(u.threads); });
  ganesha_family("sharemgr_ganesha_cpu_seconds_total",
                 "CPU time (user + system) of the running ganesha; starts over with each restart",
                 prometheus::MetricType::Counter,
                 [](const base::ProcessUsage& u) { return u.cpu_seconds; });

  // The volume as its last probe saw it (a block-device share, once mounted).
  auto volume_family = [this](const std::string& name, const std::string& help,
                              uint64_t FsUsage::*field) {
    catalogue_->AddScraped(name, help, prometheus::MetricType::Gauge, [this, field] {
      absl::MutexLock lock(&mu_);
      if (!usage_) return NoSamples();
      return std::vector{metrics::GaugeSample(static_cast<double>((*usage_).*field))};
    });
  };
  volume_family("sharemgr_volume_size_bytes", "the volume's filesystem size", &FsUsage::size_bytes);
  volume_family("sharemgr_volume_free_bytes", "bytes free on the volume for unprivileged users",
                &FsUsage::free_bytes);
  volume_family("sharemgr_volume_inodes", "the volume's inodes", &FsUsage::inodes);
  volume_family("sharemgr_volume_free_inodes", "inodes free on the volume", &FsUsage::free_inodes);
}

void ShareMetrics::OnStatus(State state, pid_t ganesha_pid) {
  std::optional<base::Clock::duration> recovered;
  {
    absl::MutexLock lock(&mu_);
    ganesha_pid_ = ganesha_pid;
    if (state == current_) return;
    const base::TimePoint now = base::Clock::now();
    current_ = state;
    last_transition_ = now;
    if (state == State::kServing && recovering_since_) recovered = now - *recovering_since_;
    if (state == State::kServing || state == State::kFailed || state == State::kStopping) {
      recovering_since_.reset();
    }
  }
  for (size_t i = 0; i < kStates.size(); ++i) state_gauges_[i]->Set(kStates[i] == state ? 1 : 0);
  if (recovered) crash_to_serving_.Observe(Seconds(*recovered));
}

supervisor::SupervisorEvents ShareMetrics::SupervisorEvents(std::function<int()> budget_left) {
  return {
      .died =
          [this, budget_left](const supervisor::Death& death) {
            OnDeath(death);
            SetDeathBudgetLeft(budget_left());
          },
      .probed =
          [this, budget_left](base::Clock::duration took, bool answered) {
            OnProbe(took, answered);
            // Deaths leave the window as time passes: the probe's cadence
            // keeps the budget current.
            SetDeathBudgetLeft(budget_left());
          },
      .missed = [this] { OnMiss(); },
      .hang_detected = [this](base::Clock::duration since) { OnHangDetected(since); },
  };
}

void ShareMetrics::OnDeath(const supervisor::Death& death) {
  deaths_.Add({{"cause", DeathCauseLabel(death)}}).Increment();
  if (death.cause == supervisor::DeathCause::kExited ||
      death.cause == supervisor::DeathCause::kSignaled) {
    crash_detection_.Observe(Seconds(death.detection));
  }
  if (!death.restarting) return;
  restarts_.Increment();
  absl::MutexLock lock(&mu_);
  if (!recovering_since_) recovering_since_ = death.noticed;
}

void ShareMetrics::OnProbe(base::Clock::duration took, bool answered) {
  if (answered) probe_duration_.Observe(Seconds(took));
}

void ShareMetrics::OnMiss() { probe_misses_.Increment(); }

void ShareMetrics::OnHangDetected(base::Clock::duration since_first_miss) {
  hang_detection_.Observe(Seconds(since_first_miss));
}

void ShareMetrics::SetDeathBudgetLeft(int deaths) {
  death_budget_left_.Set(static_cast<double>(deaths));
}

void ShareMetrics::AddVolumeHooks(VolumeHooks& hooks) {
  hooks.turned_read_only = [this] { OnReadOnly(); };
  hooks.repaired = [this](RepairKind kind, RepairOutcome outcome, base::Clock::duration took) {
    OnRepair(kind, outcome, took);
  };
  hooks.usage = [this](const FsUsage& usage) { OnVolumeUsage(usage); };
}

void ShareMetrics::OnVolumeUsage(const FsUsage& usage) {
  absl::MutexLock lock(&mu_);
  usage_ = usage;
}

void ShareMetrics::OnReadOnly() { read_only_flips_.Increment(); }

void ShareMetrics::OnRepair(RepairKind kind, RepairOutcome outcome, base::Clock::duration took) {
  repairs_.Add({{"kind", RepairKindLabel(kind)}, {"outcome", RepairOutcomeLabel(outcome)}})
      .Increment();
  repair_duration_.Add({{"kind", RepairKindLabel(kind)}}, kRepairBuckets).Observe(Seconds(took));
}

void ShareMetrics::OnVolumeOp(VolumeOp op, bool ok, base::Clock::duration took) {
  volume_ops_.Add({{"op", VolumeOpLabel(op)}, {"outcome", ok ? "ok" : "error"}}).Increment();
  volume_op_duration_.Add({{"op", VolumeOpLabel(op)}}, kVolumeOpBuckets).Observe(Seconds(took));
}

void ShareMetrics::OnRpc(const std::string& method, grpc::StatusCode code,
                         base::Clock::duration took) {
  rpc_calls_
      .Add({{"method", method},
            {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(code))}})
      .Increment();
  prometheus::Histogram* duration = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto& cached = rpc_durations_[method];
    if (cached == nullptr) cached = &rpc_duration_.Add({{"method", method}}, kRpcBuckets);
    duration = cached;
  }
  duration->Observe(Seconds(took));
}

}  // namespace sharemgr
