// --metrics-listen end to end: a real share-manager (real ganesha, real
// loop devices) scraped with a real HTTP client during the faults the other
// integration tests make, every scrape parsed by Prometheus' reference
// parser. Counters and histograms move exactly as the faults happened.
#include <doctest/doctest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "base/loopback_port.h"
#include "tests/support/daemon_process.h"
#include "tests/support/http_get.h"
#include "tests/support/make_loop.h"
#include "tests/support/metrics_scrape.h"
#include "tests/support/require_ok.h"

namespace {

namespace v1 = sharemanager::v1;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing_support::DaemonProcess;
using testing_support::MetricsScrape;
using testing_support::RequireOk;

constexpr char kDeaths[] = "sharemgr_ganesha_deaths_total";

// A daemon with --metrics-listen on a free loopback port.
struct Metered {
  explicit Metered(std::vector<std::string> flags = {}, bool wait_until_serving = true)
      : port(base::FreeLoopbackPort()) {
    REQUIRE(port != 0);
    flags.push_back("--metrics-listen");
    flags.push_back("127.0.0.1:" + std::to_string(port));
    d = RequireOk(
        DaemonProcess::Start({.extra_flags = flags, .wait_until_serving = wait_until_serving}));
  }
  MetricsScrape Scrape() const {
    auto scrape = MetricsScrape::From(port);
    REQUIRE_MESSAGE(scrape.ok(), scrape.status().ToString());
    return *std::move(scrape);
  }
  // Every death cause counted so far, by label.
  std::map<std::string, double> Deaths() const { return Scrape().Series(kDeaths); }

  uint16_t port;
  std::unique_ptr<DaemonProcess> d;
};

std::unique_ptr<Metered> OnDevice(const testing_support::LoopDevice& loop) {
  return std::make_unique<Metered>(std::vector<std::string>{"--device", loop.path(), "--fs", "ext4",
                                                            "--volume-probe-interval", "200ms"});
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The difference of two scrapes for one series.
double Delta(const MetricsScrape& before, const MetricsScrape& after, const std::string& series) {
  return after.Count(series) - before.Count(series);
}

// Waits for SERVING again after a volume repair (the remount generation moved).
v1::ShareStatus RepairedAfter(DaemonProcess& d, uint64_t generation) {
  return RequireOk(d.WaitFor(
      [&](const v1::ShareStatus& s) {
        return s.state() == v1::SERVING && s.remount_generation() > generation;
      },
      milliseconds(20'000), "SERVING after a repair"));
}

}  // namespace

TEST_CASE(
    "metrics 1. SIGKILL ganesha: one death of cause signal_9, one restart, one detection, "
    "one crash->SERVING") {
  Metered m;
  const auto before = m.Scrape();
  CHECK(before.Value("sharemgr_share_state{state=\"SERVING\"}") == 1);
  CHECK(before.Value("sharemgr_share_state{state=\"DEGRADED\"}") == 0);
  CHECK(before.Series(kDeaths).empty());
  CHECK(before.Value("sharemgr_ganesha_death_budget_remaining") == 5);
  const pid_t old_pid = RequireOk(m.d->Status()).ganesha_pid();
  const auto killed_at = Clock::now();
  REQUIRE(testing_support::KillPid(old_pid, SIGKILL) == 0);
  RequireOk(m.d->WaitFor(
      [&](const v1::ShareStatus& s) {
        return s.state() == v1::SERVING && s.ganesha_pid() != old_pid;
      },
      milliseconds(10'000), "SERVING with a new ganesha"));
  const auto after = m.Scrape();
  const double elapsed = Seconds(Clock::now() - killed_at);
  CHECK(after.Series(kDeaths) == std::map<std::string, double>{{"{cause=\"signal_9\"}", 1}});
  CHECK(Delta(before, after, "sharemgr_ganesha_restarts_total") == 1);
  CHECK(after.Value("sharemgr_ganesha_death_budget_remaining") == 4);
  CHECK(Delta(before, after, "sharemgr_ganesha_crash_detection_seconds_count") == 1);
  CHECK(Delta(before, after, "sharemgr_ganesha_crash_to_serving_seconds_count") == 1);
  CHECK(after.Count("sharemgr_ganesha_crash_to_serving_seconds_sum") <= elapsed);
  CHECK(after.Count("sharemgr_ganesha_crash_detection_seconds_sum") <=
        after.Count("sharemgr_ganesha_crash_to_serving_seconds_sum"));
  CHECK(Delta(before, after, "sharemgr_ganesha_hang_detection_seconds_count") == 0);
  CHECK(after.Value("sharemgr_share_state{state=\"SERVING\"}") == 1);
  CHECK(after.Value("sharemgr_share_seconds_since_last_transition") <= elapsed);
}

TEST_CASE(
    "metrics 2. SIGSTOP ganesha: three misses, one hang detection, one death of cause hang "
    "(not signal_9)") {
  Metered m({"--probe-interval", "200ms", "--probe-failures", "3"});
  const auto before = m.Scrape();
  const pid_t old_pid = RequireOk(m.d->Status()).ganesha_pid();
  const auto stopped_at = Clock::now();
  REQUIRE(testing_support::KillPid(old_pid, SIGSTOP) == 0);
  RequireOk(m.d->WaitFor(
      [&](const v1::ShareStatus& s) {
        return s.state() == v1::SERVING && s.ganesha_pid() != old_pid;
      },
      milliseconds(10'000), "SERVING with a new ganesha"));
  const auto after = m.Scrape();
  const double elapsed = Seconds(Clock::now() - stopped_at);
  CHECK(after.Series(kDeaths) == std::map<std::string, double>{{"{cause=\"hang\"}", 1}});
  CHECK(Delta(before, after, "sharemgr_ganesha_probe_misses_total") == 3);
  CHECK(Delta(before, after, "sharemgr_ganesha_hang_detection_seconds_count") == 1);
  // Three probes that each waited out their 200 ms timeout (give or take the
  // millisecond their polls round to), and no more than the hang lasted.
  const double hang = after.Count("sharemgr_ganesha_hang_detection_seconds_sum");
  CHECK_MESSAGE(hang >= 0.55, m.d->output());
  CHECK(hang <= elapsed);
  CHECK(Delta(before, after, "sharemgr_ganesha_crash_detection_seconds_count") == 0);
  CHECK(Delta(before, after, "sharemgr_ganesha_crash_to_serving_seconds_count") == 1);
  CHECK(Delta(before, after, "sharemgr_ganesha_restarts_total") == 1);
}

TEST_CASE(
    "metrics 3. the listener serves /metrics only, gRPC calls are counted by method and code, "
    "ganesha's process figures are read") {
  Metered m;
  for (const char* path : {"/", "/metrics/", "/healthz", "/debug/pprof"}) {
    CAPTURE(path);
    CHECK(RequireOk(testing_support::HttpGet("127.0.0.1", m.port, path)).status == 404);
  }
  CHECK(RequireOk(testing_support::HttpRequest("127.0.0.1", m.port, "POST", "/metrics")).status ==
        405);

  const std::string get_status =
      "sharemgr_grpc_calls_total{code=\"OK\",method=\"/sharemanager.v1.ShareManager/GetStatus\"}";
  const std::string refused_mount =
      "sharemgr_grpc_calls_total{code=\"FAILED_PRECONDITION\",method=\"/sharemanager.v1."
      "ShareManager/Mount\"}";
  const auto before = m.Scrape();
  for (int i = 0; i < 3; ++i) REQUIRE(m.d->Status().ok());
  grpc::ClientContext context;
  v1::MountRequest mount;
  mount.set_epoch(7);  // an unfenced share-manager refuses any epoch
  v1::MountResponse response;
  const auto rpc = m.d->Stub()->Mount(&context, mount, &response);
  REQUIRE(rpc.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  const auto after = m.Scrape();
  CHECK(Delta(before, after, get_status) == 3);
  CHECK(Delta(before, after, refused_mount) == 1);
  CHECK(Delta(before, after,
              "sharemgr_grpc_call_duration_seconds_count{method=\"/sharemanager.v1.ShareManager/"
              "GetStatus\"}") == 3);

  // ganesha's own figures (it starts and ends threads as it likes: only their
  // order of size is checked).
  CHECK(after.Count("sharemgr_ganesha_threads") > 1);
  CHECK(after.Count("sharemgr_ganesha_resident_memory_bytes") > 1 << 20);
  CHECK(after.Count("sharemgr_ganesha_open_fds") > 3);
  CHECK(after.Value("sharemgr_ganesha_cpu_seconds_total").has_value());
  // No --ganesha-memory-limit: no limit sample (a 0 would read as a limit).
  CHECK_FALSE(after.Value("sharemgr_ganesha_memory_limit_bytes").has_value());
  // A directory share has no volume probe: no volume figures.
  CHECK_FALSE(after.Value("sharemgr_volume_size_bytes").has_value());
}

TEST_CASE("metrics 4. --metrics-listen on a port in use: exit 4, nothing started") {
  Metered first;
  auto second = DaemonProcess::Start(
      {.volume = "pvc-second",
       .extra_flags = {"--metrics-listen", "127.0.0.1:" + std::to_string(first.port)},
       .wait_until_serving = false});
  REQUIRE(second.ok());
  const auto code = (*second)->WaitExit(milliseconds(10'000));
  REQUIRE(code.ok());
  CHECK(*code == 4);
  CHECK((*second)->output().find("--metrics-listen") != std::string::npos);
}

TEST_CASE("metrics 5. a read-only remount: one flip, one in-place repair, the volume's figures") {
  auto loop = testing_support::MakeLoop("ext4");
  auto m = OnDevice(*loop);
  const auto status = RequireOk(m->d->Status());
  const auto before = m->Scrape();
  CHECK(before.Value("sharemgr_volume_size_bytes") == static_cast<double>(status.size_bytes()));
  CHECK(before.Count("sharemgr_volume_inodes") > 0);
  CHECK(before.Count("sharemgr_volume_free_inodes") > 0);
  CHECK(before.Count("sharemgr_volume_free_bytes") > 0);
  REQUIRE(
      testing_support::RunCommand({"mount", "-o", "remount,ro", m->d->export_dir()}).exit_code ==
      0);
  RepairedAfter(*m->d, status.remount_generation());
  const auto after = m->Scrape();
  CHECK(Delta(before, after, "sharemgr_volume_read_only_flips_total") == 1);
  CHECK(after.Series("sharemgr_volume_repairs_total") ==
        std::map<std::string, double>{{"{kind=\"full\",outcome=\"failed\"}", 0},
                                      {"{kind=\"full\",outcome=\"not_run\"}", 0},
                                      {"{kind=\"full\",outcome=\"ok\"}", 0},
                                      {"{kind=\"remount\",outcome=\"failed\"}", 0},
                                      {"{kind=\"remount\",outcome=\"not_run\"}", 0},
                                      {"{kind=\"remount\",outcome=\"ok\"}", 1}});
  CHECK(Delta(before, after, "sharemgr_volume_repair_duration_seconds_count{kind=\"remount\"}") ==
        1);
  CHECK(after.Series(kDeaths).empty());
}

TEST_CASE(
    "metrics 6. an ext4 error: one flip, one full repair, then a trim and a resize are "
    "counted") {
  auto loop = testing_support::MakeLoop("ext4");
  auto m = OnDevice(*loop);
  const auto before = m->Scrape();
  const uint64_t generation = RequireOk(m->d->Status()).remount_generation();
  {
    std::ofstream trigger("/sys/fs/ext4/" +
                          std::filesystem::path(loop->path()).filename().string() +
                          "/trigger_fs_error");
    trigger << "metrics test error\n";
  }
  RepairedAfter(*m->d, generation);
  const auto repaired = m->Scrape();
  CHECK(Delta(before, repaired, "sharemgr_volume_read_only_flips_total") == 1);
  CHECK(Delta(before, repaired, "sharemgr_volume_repairs_total{kind=\"full\",outcome=\"ok\"}") ==
        1);
  CHECK(Delta(before, repaired, "sharemgr_volume_repairs_total{kind=\"remount\",outcome=\"ok\"}") ==
        0);
  CHECK(Delta(before, repaired,
              "sharemgr_volume_repairs_total{kind=\"remount\",outcome=\"failed\"}") == 0);
  CHECK(Delta(before, repaired, "sharemgr_volume_repair_duration_seconds_count{kind=\"full\"}") ==
        1);

  for (bool trim : {true, false}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (trim) {
      v1::FilesystemTrimResponse response;
      REQUIRE(m->d->Stub()->FilesystemTrim(&context, {}, &response).ok());
    } else {
      v1::FilesystemResizeResponse response;  // already the device's size: a no-op
      REQUIRE(m->d->Stub()->FilesystemResize(&context, {}, &response).ok());
    }
  }
  const auto after = m->Scrape();
  CHECK(after.Value("sharemgr_volume_operations_total{op=\"trim\",outcome=\"ok\"}") == 1);
  CHECK(after.Value("sharemgr_volume_operations_total{op=\"resize\",outcome=\"ok\"}") == 1);
  CHECK(after.Value("sharemgr_volume_operation_duration_seconds_count{op=\"trim\"}") == 1);
  CHECK(after.Value("sharemgr_volume_operation_duration_seconds_count{op=\"resize\"}") == 1);
}

TEST_CASE(
    "metrics 7. a memory kill: one death of cause memory (not signal_9), the limit beside "
    "ganesha's RSS") {
  // An idle ganesha is over 1 MiB: killed at its first sample, and with no
  // death to spare that one kill fails the share, so no other follows it.
  // The failed share lingers, still scraped.
  Metered m({"--ganesha-memory-limit", "1Mi", "--ganesha-memory-grace", "0s", "--probe-interval",
             "100ms", "--max-deaths", "0", "--failed-linger", "10s"},
            /*wait_until_serving=*/false);
  const auto failed =
      RequireOk(m.d->WaitFor([](const v1::ShareStatus& s) { return s.state() == v1::FAILED; },
                             milliseconds(20'000), "FAILED after a memory kill"));
  CHECK(failed.memory_kills() == 1);
  const auto after = m.Scrape();
  CHECK(after.Series(kDeaths) == std::map<std::string, double>{{"{cause=\"memory\"}", 1}});
  CHECK(after.Value("sharemgr_ganesha_memory_limit_bytes") == 1 << 20);
  CHECK(after.Value("sharemgr_ganesha_restarts_total") == 0);
  CHECK(after.Value("sharemgr_ganesha_crash_detection_seconds_count") == 0);
  CHECK(after.Value("sharemgr_share_state{state=\"FAILED\"}") == 1);
}
