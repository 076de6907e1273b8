// share-manager's metrics: each hook moves exactly its families, as the
// README's Metrics section says; scraped families read /proc and the
// volume's last probe.
#include "sharemgr/metrics.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <ctime>

#include "prometheus/text_serializer.h"
#include "tests/metrics/collected.h"
#include "tests/support/metrics_scrape.h"
#include "tests/support/require_ok.h"

namespace sharemgr {
namespace {

using std::chrono::milliseconds;
using supervisor::Death;
using supervisor::DeathCause;
using supervisor::State;
using testing_support::Collected;

Death Killed(int signal, bool restarting = true) {
  return Death{.cause = DeathCause::kSignaled,
               .exit = {.code = -1, .signal = signal},
               .noticed = base::Clock::now(),
               .detection = milliseconds(2),
               .restarting = restarting};
}

std::map<std::string, double> States(const ShareMetrics& m) {
  const Collected now(*m.catalogue());
  std::map<std::string, double> out;
  for (const char* s : {"STARTING", "SERVING", "DEGRADED", "FAILED", "STOPPING"}) {
    out[s] = now.Value("sharemgr_share_state", {{"state", s}});
  }
  return out;
}

}  // namespace

TEST_CASE("share metrics: one state gauge per state, 1 for the current one") {
  ShareMetrics m;
  CHECK(States(m) ==
        std::map<std::string, double>{
            {"STARTING", 1}, {"SERVING", 0}, {"DEGRADED", 0}, {"FAILED", 0}, {"STOPPING", 0}});
  m.OnStatus(State::kServing, 42);
  m.OnStatus(State::kDegraded, 0);
  CHECK(States(m) ==
        std::map<std::string, double>{
            {"STARTING", 0}, {"SERVING", 0}, {"DEGRADED", 1}, {"FAILED", 0}, {"STOPPING", 0}});
  const double age =
      Collected(*m.catalogue()).Value("sharemgr_share_seconds_since_last_transition");
  CHECK(age >= 0);
  CHECK(age < 3600);
}

TEST_CASE("share metrics: death causes as labels") {
  CHECK(ShareMetrics::DeathCauseLabel(Killed(9)) == "signal_9");
  CHECK(ShareMetrics::DeathCauseLabel({.cause = DeathCause::kExited, .exit = {.code = 2}}) ==
        "exit_2");
  CHECK(ShareMetrics::DeathCauseLabel({.cause = DeathCause::kHung}) == "hang");
  CHECK(ShareMetrics::DeathCauseLabel({.cause = DeathCause::kStartTimeout}) == "start_timeout");
  CHECK(ShareMetrics::DeathCauseLabel({.cause = DeathCause::kSpawnFailed}) == "spawn_failed");
  CHECK(ShareMetrics::DeathCauseLabel({.cause = DeathCause::kMemory}) == "memory");
}

TEST_CASE(
    "share metrics: a crash is one death of its cause, one restart, one detection, and one "
    "crash->SERVING when SERVING again") {
  ShareMetrics m;
  m.OnStatus(State::kServing, 10);
  const auto before_death = base::Clock::now();
  m.OnDeath(Killed(9));
  m.OnStatus(State::kDegraded, 0);
  m.OnStatus(State::kDegraded, 11);  // restarted: same state, new pid
  {
    const Collected now(*m.catalogue());
    CHECK(now.Value("sharemgr_ganesha_deaths_total", {{"cause", "signal_9"}}) == 1);
    CHECK(now.Value("sharemgr_ganesha_restarts_total") == 1);
    CHECK(now.HistogramCount("sharemgr_ganesha_crash_detection_seconds") == 1);
    CHECK(now.HistogramSum("sharemgr_ganesha_crash_detection_seconds") == doctest::Approx(0.002));
    CHECK(now.HistogramCount("sharemgr_ganesha_crash_to_serving_seconds") == 0);
    CHECK(now.HistogramCount("sharemgr_ganesha_hang_detection_seconds") == 0);
  }
  m.OnStatus(State::kServing, 11);
  const auto after_serving = base::Clock::now();
  const Collected now(*m.catalogue());
  CHECK(now.HistogramCount("sharemgr_ganesha_crash_to_serving_seconds") == 1);
  const double recovery = now.HistogramSum("sharemgr_ganesha_crash_to_serving_seconds");
  CHECK(recovery >= 0);
  CHECK(recovery <= metrics::Seconds(after_serving - before_death));
  // SERVING again without a death in between measures nothing.
  m.OnStatus(State::kDegraded, 11);
  m.OnStatus(State::kServing, 11);
  CHECK(Collected(*m.catalogue()).HistogramCount("sharemgr_ganesha_crash_to_serving_seconds") == 1);
}

TEST_CASE(
    "share metrics: a recovery through several deaths is one crash->SERVING, from the "
    "first") {
  ShareMetrics m;
  m.OnStatus(State::kServing, 10);
  Death first = Killed(9);
  first.noticed = base::Clock::now() - milliseconds(500);
  m.OnDeath(first);
  m.OnStatus(State::kDegraded, 11);
  m.OnDeath({.cause = DeathCause::kExited,
             .exit = {.code = 1},
             .noticed = base::Clock::now(),
             .restarting = true});
  m.OnStatus(State::kServing, 12);
  const Collected now(*m.catalogue());
  CHECK(now.Value("sharemgr_ganesha_deaths_total", {{"cause", "signal_9"}}) == 1);
  CHECK(now.Value("sharemgr_ganesha_deaths_total", {{"cause", "exit_1"}}) == 1);
  CHECK(now.Value("sharemgr_ganesha_restarts_total") == 2);
  CHECK(now.HistogramCount("sharemgr_ganesha_crash_to_serving_seconds") == 1);
  CHECK(now.HistogramSum("sharemgr_ganesha_crash_to_serving_seconds") >= 0.5);
}

TEST_CASE(
    "share metrics: the death that spends the budget restarts nothing and starts no "
    "recovery") {
  ShareMetrics m;
  m.OnDeath(Killed(6, /*restarting=*/false));
  m.OnStatus(State::kFailed, 0);
  m.SetDeathBudgetLeft(0);
  const Collected now(*m.catalogue());
  CHECK(now.Value("sharemgr_ganesha_deaths_total", {{"cause", "signal_6"}}) == 1);
  CHECK(now.Value("sharemgr_ganesha_restarts_total") == 0);
  CHECK(now.Value("sharemgr_ganesha_death_budget_remaining") == 0);
  CHECK(now.HistogramCount("sharemgr_ganesha_crash_to_serving_seconds") == 0);
}

TEST_CASE(
    "share metrics: a hang is a hang detection and a death of cause hang, no crash "
    "detection") {
  ShareMetrics m;
  m.OnStatus(State::kServing, 10);
  for (int i = 0; i < 3; ++i) {
    m.OnProbe(milliseconds(1000), /*answered=*/false);
    m.OnMiss();
  }
  m.OnHangDetected(milliseconds(3000));
  m.OnDeath({.cause = DeathCause::kHung,
             .exit = {.code = -1, .signal = 9},
             .noticed = base::Clock::now(),
             .restarting = true});
  const Collected now(*m.catalogue());
  CHECK(now.Value("sharemgr_ganesha_probe_misses_total") == 3);
  CHECK(now.HistogramCount("sharemgr_ganesha_probe_duration_seconds") == 0);
  CHECK(now.HistogramCount("sharemgr_ganesha_hang_detection_seconds") == 1);
  CHECK(now.HistogramSum("sharemgr_ganesha_hang_detection_seconds") == doctest::Approx(3.0));
  CHECK(now.Value("sharemgr_ganesha_deaths_total", {{"cause", "hang"}}) == 1);
  CHECK(now.Find("sharemgr_ganesha_deaths_total", {{"cause", "signal_9"}}) == nullptr);
  CHECK(now.HistogramCount("sharemgr_ganesha_crash_detection_seconds") == 0);
}

TEST_CASE(
    "share metrics: a memory kill is one death of cause memory and one restart, no crash "
    "detection, and the limit is exported only when set") {
  CHECK(Collected(*ShareMetrics().catalogue()).Samples("sharemgr_ganesha_memory_limit_bytes") == 0);
  ShareMetrics m(512ull << 20);
  m.OnStatus(State::kServing, 10);
  // As the supervisor reports it: SIGKILLed, but over its limit, not crashed.
  m.OnDeath({.cause = DeathCause::kMemory,
             .exit = {.code = -1, .signal = 9},
             .noticed = base::Clock::now(),
             .detection = milliseconds(1),
             .restarting = true});
  m.OnStatus(State::kDegraded, 0);
  m.OnStatus(State::kServing, 11);
  const Collected now(*m.catalogue());
  CHECK(now.Value("sharemgr_ganesha_memory_limit_bytes") == 512 << 20);
  CHECK(now.Value("sharemgr_ganesha_deaths_total", {{"cause", "memory"}}) == 1);
  CHECK(now.Samples("sharemgr_ganesha_deaths_total") == 1);  // not signal_9 besides
  CHECK(now.Value("sharemgr_ganesha_restarts_total") == 1);
  CHECK(now.HistogramCount("sharemgr_ganesha_crash_detection_seconds") == 0);
  CHECK(now.HistogramCount("sharemgr_ganesha_crash_to_serving_seconds") == 1);
}

TEST_CASE(
    "share metrics: answered probes are timed, failed ones are not, misses are counted apart") {
  ShareMetrics m;
  m.OnProbe(std::chrono::microseconds(300), true);
  m.OnProbe(std::chrono::microseconds(500), true);
  m.OnProbe(milliseconds(3), false);
  const Collected now(*m.catalogue());
  CHECK(now.HistogramCount("sharemgr_ganesha_probe_duration_seconds") == 2);
  CHECK(now.HistogramSum("sharemgr_ganesha_probe_duration_seconds") == doctest::Approx(0.0008));
  CHECK(now.Value("sharemgr_ganesha_probe_misses_total") == 0);
}

TEST_CASE(
    "share metrics: ganesha's process figures come from /proc at scrape time, none "
    "without a ganesha") {
  ShareMetrics m;
  const char* names[] = {"sharemgr_ganesha_resident_memory_bytes", "sharemgr_ganesha_open_fds",
                         "sharemgr_ganesha_threads", "sharemgr_ganesha_cpu_seconds_total"};
  {
    const Collected now(*m.catalogue());
    for (const char* name : names) CHECK(now.Samples(name) == 0);
  }
  m.OnStatus(State::kServing, getpid());  // this process stands in for ganesha
  // Some CPU time to show (the kernel counts it in 10 ms ticks).
  const std::clock_t until = std::clock() + CLOCKS_PER_SEC / 20;
  while (std::clock() < until) {
  }
  const Collected now(*m.catalogue());
  CHECK(now.Value("sharemgr_ganesha_resident_memory_bytes") > 1 << 20);
  CHECK(now.Value("sharemgr_ganesha_open_fds") >= 3);
  CHECK(now.Value("sharemgr_ganesha_threads") >= 1);
  CHECK(now.Value("sharemgr_ganesha_cpu_seconds_total") > 0);
  CHECK(now.Family("sharemgr_ganesha_cpu_seconds_total")->type == prometheus::MetricType::Counter);
}

TEST_CASE("share metrics: volume usage from the last probe, flips, repairs, trims and resizes") {
  ShareMetrics m;
  CHECK(Collected(*m.catalogue()).Samples("sharemgr_volume_size_bytes") == 0);
  VolumeHooks hooks;
  m.AddVolumeHooks(hooks);
  hooks.usage(FsUsage{.size_bytes = 1000, .free_bytes = 400, .inodes = 64, .free_inodes = 60});
  hooks.turned_read_only();
  hooks.repaired(RepairKind::kRemount, RepairOutcome::kFailed, milliseconds(20));
  hooks.repaired(RepairKind::kFull, RepairOutcome::kOk, milliseconds(1500));
  m.OnVolumeOp(VolumeOp::kTrim, true, milliseconds(40));
  m.OnVolumeOp(VolumeOp::kResize, false, milliseconds(10));
  const Collected now(*m.catalogue());
  CHECK(now.Value("sharemgr_volume_size_bytes") == 1000);
  CHECK(now.Value("sharemgr_volume_free_bytes") == 400);
  CHECK(now.Value("sharemgr_volume_inodes") == 64);
  CHECK(now.Value("sharemgr_volume_free_inodes") == 60);
  CHECK(now.Value("sharemgr_volume_read_only_flips_total") == 1);
  CHECK(now.Value("sharemgr_volume_repairs_total", {{"kind", "remount"}, {"outcome", "failed"}}) ==
        1);
  CHECK(now.Value("sharemgr_volume_repairs_total", {{"kind", "full"}, {"outcome", "ok"}}) == 1);
  CHECK(now.Value("sharemgr_volume_repairs_total", {{"kind", "remount"}, {"outcome", "ok"}}) == 0);
  CHECK(now.HistogramCount("sharemgr_volume_repair_duration_seconds", {{"kind", "full"}}) == 1);
  CHECK(now.HistogramSum("sharemgr_volume_repair_duration_seconds", {{"kind", "full"}}) ==
        doctest::Approx(1.5));
  CHECK(now.Value("sharemgr_volume_operations_total", {{"op", "trim"}, {"outcome", "ok"}}) == 1);
  CHECK(now.Value("sharemgr_volume_operations_total", {{"op", "resize"}, {"outcome", "error"}}) ==
        1);
  CHECK(now.HistogramCount("sharemgr_volume_operation_duration_seconds", {{"op", "trim"}}) == 1);
}

TEST_CASE("share metrics: gRPC calls by method and code, timed by method") {
  ShareMetrics m;
  m.OnRpc("/sharemanager.v1.ShareManager/GetStatus", grpc::StatusCode::OK, milliseconds(1));
  m.OnRpc("/sharemanager.v1.ShareManager/GetStatus", grpc::StatusCode::OK, milliseconds(3));
  m.OnRpc("/sharemanager.v1.ShareManager/Mount", grpc::StatusCode::FAILED_PRECONDITION,
          milliseconds(2));
  const Collected now(*m.catalogue());
  CHECK(now.Value("sharemgr_grpc_calls_total",
                  {{"method", "/sharemanager.v1.ShareManager/GetStatus"}, {"code", "OK"}}) == 2);
  CHECK(now.Value("sharemgr_grpc_calls_total", {{"method", "/sharemanager.v1.ShareManager/Mount"},
                                                {"code", "FAILED_PRECONDITION"}}) == 1);
  CHECK(now.HistogramCount("sharemgr_grpc_call_duration_seconds",
                           {{"method", "/sharemanager.v1.ShareManager/GetStatus"}}) == 2);
  CHECK(now.HistogramSum("sharemgr_grpc_call_duration_seconds",
                         {{"method", "/sharemanager.v1.ShareManager/GetStatus"}}) ==
        doctest::Approx(0.004));
}

TEST_CASE("share metrics: the whole exposition is valid for Prometheus' reference parser") {
  ShareMetrics m(uint64_t{1} << 30);  // a memory limit: every family has a sample
  m.OnStatus(State::kServing, getpid());
  m.OnDeath(Killed(9));
  m.OnRpc("/x/y", grpc::StatusCode::UNAVAILABLE, milliseconds(1));
  m.OnVolumeUsage({.size_bytes = 1});
  const std::string text = prometheus::TextSerializer().Serialize(m.catalogue()->Collect());
  const auto scrape = testing_support::RequireOk(testing_support::MetricsScrape::Parse(text));
  CHECK(scrape.Value("sharemgr_ganesha_deaths_total{cause=\"signal_9\"}") == 1);
  CHECK(scrape.Value("sharemgr_share_state{state=\"SERVING\"}") == 1);
  CHECK(scrape.families().at("sharemgr_ganesha_crash_to_serving_seconds") == "histogram");
  // Every family declared is in it, with the type declared.
  for (const auto& entry : m.catalogue()->entries()) {
    CAPTURE(entry.name);
    std::string family = entry.name;
    if (entry.type == prometheus::MetricType::Counter) {
      REQUIRE(family.size() > 6);
      CHECK(family.substr(family.size() - 6) == "_total");  // Prometheus' naming rule
      family.resize(family.size() - 6);
    }
    REQUIRE(scrape.families().count(family) == 1);
  }
}

}  // namespace sharemgr
