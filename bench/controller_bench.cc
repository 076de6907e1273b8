// Controller benchmarks (docs/BENCHMARKS.md):
//  1. reconcile passes per second on one thread, MemoryStore + simulated
//     cluster, for growing numbers of shares (steady state: every share RUNNING);
//  2. end to end with real processes (LocalPodRuntime, share-manager, ganesha):
//     share-manager exit or freeze -> status ERROR -> new pod RUNNING -> first
//     successful NFS write;
//  3. with --live-pods: reconcile passes per second against N live pods (real
//     share-manager and ganesha each, LocalPodRuntime, real GetStatus calls
//     through GrpcShareConnector), with the GetStatus latency.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
#include "bench/abort_run.h"
#include "bench/reconcile_passes.h"
#include "bench/series.h"
#include "controller/core/controller.h"
#include "controller/core/reconciler.h"
#include "controller/runtime/grpc_share_connector.h"
#include "controller/runtime/local/local_pod_runtime.h"
#include "controller/store/memory_store.h"
#include "controller/testing/simulated_runtime.h"
#include "tests/support/daemon_process.h"
#include "tests/support/nfs_client.h"

namespace {

namespace pb = sharemanager::controller::v1;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

using bench::Series;

void PassesPerSecond(const std::vector<int>& sizes, double seconds) {
  std::cout << "\n### Reconcile passes per second (one thread, steady state)\n\n"
            << "| shares | passes | passes/s | µs/pass |\n|---|---|---|---|\n";
  for (int n : sizes) {
    controller::MemoryStore store;
    const auto rate = bench::MeasurePasses(store, n, seconds);
    std::cout << absl::StrFormat("| %d | %d | %.0f | %.2f |\n", n, rate.passes, rate.per_second(),
                                 rate.seconds * 1e6 / static_cast<double>(rate.passes));
    std::cout.flush();
  }
}

// One LocalPodRuntime share under a real controller; records when each phase is stored.
struct E2E {
  E2E(const std::string& binary, int64_t rpc_timeout_ms, int64_t grace_ms) {
    char tmpl[] = "/tmp/sharemgr-cbench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw bench::AbortRun("mkdtemp failed");
    dir = tmpl;
    auto opened = controller::LocalPodRuntime::Open(controller::LocalPodRuntimeOptions{
        .share_manager_binary = binary,
        .work_dir = dir,
        .daemon_flags = {"--grace-period", "2", "--lease-lifetime", "2", "--log-level", "warn"},
        .termination_grace = milliseconds(2000)});
    if (!opened.ok()) {
      std::cerr << opened.status() << "\n";
      std::exit(1);
    }
    runtime = *std::move(opened);
    connector = std::make_unique<controller::GrpcShareConnector>(
        controller::ShareClientOptions{.deadline = milliseconds(rpc_timeout_ms)});
    pb::ShareRecord r;
    r.set_name("bench");
    r.mutable_spec()->set_volume("bench");
    r.mutable_spec()->set_serve(true);
    bench::ValueOrAbort(store.Create(r), "store Create");
    store.Watch([this](const std::string& name) {
      auto rec = store.Get(name);
      if (!rec.ok()) return;
      std::lock_guard lock(mu);
      events.push_back({Clock::now(), rec->status().phase(), rec->status().epoch()});
    });
    controller::ControllerOptions options;
    options.workers = 2;
    options.reconciler.resync_ms = 200;
    options.reconciler.unhealthy_grace_ms = grace_ms;
    // Runs are a few seconds apart; a shorter "stable run" keeps each
    // replacement isolated instead of backing off as a crash loop would.
    options.reconciler.stable_ms = 2500;
    ctl = std::make_unique<controller::Controller>(store, *runtime, *connector, clock, options);
    if (auto started = ctl->Start(); !started.ok()) {
      Cleanup();
      throw bench::AbortRun("controller Start: " + started.ToString());
    }
  }
  ~E2E() { Cleanup(); }
  void Cleanup() {
    if (ctl) ctl->Stop();
    runtime.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::optional<Clock::time_point> WaitPhase(Clock::time_point after, pb::Phase phase,
                                             uint64_t min_epoch, milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      {
        std::lock_guard lock(mu);
        for (const auto& e : events) {
          if (e.at >= after && e.phase == phase && e.epoch >= min_epoch) return e.at;
        }
      }
      std::this_thread::sleep_for(milliseconds(1));
    }
    return std::nullopt;
  }
  pb::ShareStatusRecord Status() {
    return bench::ValueOrAbort(store.Get("bench"), "store Get").status();
  }

  struct Event {
    Clock::time_point at;
    pb::Phase phase;
    uint64_t epoch;
  };
  std::string dir;
  controller::MemoryStore store;
  std::unique_ptr<controller::LocalPodRuntime> runtime;
  std::unique_ptr<controller::GrpcShareConnector> connector;
  controller::SystemWallClock clock;
  std::unique_ptr<controller::Controller> ctl;
  std::mutex mu;
  std::vector<Event> events;
};

void EndToEnd(const std::string& kind, int runs, int64_t rpc_timeout_ms, int64_t grace_ms) {
  Series error(kind + " -> status ERROR");
  Series running(kind + " -> new pod RUNNING");
  Series write(kind + " -> first NFS write succeeds");
  E2E e2e(testing_support::ShareManagerBinary(), rpc_timeout_ms, grace_ms);
  for (int i = 0; i < runs; ++i) {
    const auto started = e2e.WaitPhase(Clock::time_point{}, pb::RUNNING,
                                       static_cast<uint64_t>(i + 1), milliseconds(30'000));
    if (!started) throw bench::AbortRun("share never RUNNING");
    std::this_thread::sleep_for(milliseconds(3000));  // steady, NFS leases lapsed
    const auto st = e2e.Status();
    const pid_t pid = bench::PidOrAbort(e2e.runtime->Pid(st.pod()), "pod " + st.pod());
    const uint16_t port = e2e.runtime->NfsPort("bench");
    const auto t0 = Clock::now();
    kill(pid, kind == "frozen" ? SIGSTOP : SIGKILL);
    const auto err = e2e.WaitPhase(t0, pb::ERROR, st.epoch(), milliseconds(30'000));
    const auto run = e2e.WaitPhase(t0, pb::RUNNING, st.epoch() + 1, milliseconds(30'000));
    std::optional<Clock::time_point> wrote;
    while (run && !wrote && Clock::now() - t0 < std::chrono::seconds(30)) {
      if (testing_support::WriteOnce("127.0.0.1", port, "/bench", "/w-" + std::to_string(i), "x",
                                     milliseconds(500))
              .ok()) {
        wrote = Clock::now();
      } else {
        std::this_thread::sleep_for(milliseconds(2));
      }
    }
    error.Record(t0, err);
    running.Record(t0, run);
    write.Record(t0, wrote);
  }
  std::cout << "\n### End to end: " << kind << " share-manager (" << runs << " runs; RPC deadline "
            << rpc_timeout_ms << " ms, unhealthy grace " << grace_ms << " ms)\n\n"
            << Series::kHeader << error.Row() << "\n"
            << running.Row() << "\n"
            << write.Row() << "\n";
  std::cout.flush();
}

// Set by SIGINT/SIGTERM: the live-pods run stops where it is and its
// destructors stop every pod and remove every temp dir.
std::atomic<bool> g_interrupted{false};
extern "C" void OnInterrupt(int) { g_interrupted = true; }

void AbortIfInterrupted() {
  if (g_interrupted) throw bench::AbortRun("interrupted");
}

// Times each Observe (one GetStatus round trip) of the wrapped connector.
class TimedConnector final : public controller::ShareConnector {
 public:
  explicit TimedConnector(controller::ShareConnector& inner) : inner_(inner) {}
  controller::ShareObservation Observe(const controller::Pod& pod) override {
    const auto start = Clock::now();
    auto seen = inner_.Observe(pod);
    const double ms = bench::Ms(Clock::now() - start);
    std::lock_guard lock(mu_);
    latencies_ms_.push_back(ms);
    if (!seen.reachable) ++unanswered_;
    return seen;
  }
  absl::StatusOr<uint64_t> Mount(const controller::Pod& pod, uint64_t epoch,
                                 uint64_t generation) override {
    return inner_.Mount(pod, epoch, generation);
  }
  // The samples since the last call, sorted, and how many were not answered.
  std::pair<std::vector<double>, int> Take() {
    std::lock_guard lock(mu_);
    auto v = std::move(latencies_ms_);
    latencies_ms_.clear();
    std::sort(v.begin(), v.end());
    return {std::move(v), std::exchange(unanswered_, 0)};
  }

 private:
  controller::ShareConnector& inner_;
  std::mutex mu_;
  std::vector<double> latencies_ms_;
  int unanswered_ = 0;
};

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];  // nearest rank
}

// A /proc/PID file's "Key: N kB" value (0 when unreadable).
int64_t ProcKiB(pid_t pid, const std::string& file, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file);
  std::string word;
  int64_t value = 0;
  while (in >> word) {
    if (word == key && in >> value) return value;
  }
  return 0;
}

// The memory of a pod's share-manager and its children (ganesha), as PSS:
// shared library pages are split among the processes that map them, so the
// sum over pods is what they cost together.
struct PodMemory {
  int64_t share_manager_kib = 0;
  int64_t ganesha_kib = 0;
};
PodMemory MemoryOf(pid_t share_manager) {
  PodMemory m{.share_manager_kib = ProcKiB(share_manager, "smaps_rollup", "Pss:")};
  const std::string pid = std::to_string(share_manager);
  std::ifstream children("/proc/" + pid + "/task/" + pid + "/children");
  pid_t child = 0;
  while (children >> child) m.ganesha_kib += ProcKiB(child, "smaps_rollup", "Pss:");
  return m;
}

// Removes a temp dir on the way out, after everything declared after it.
struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/sharemgr-cbench-live-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw bench::AbortRun("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
};

// N real pods (share-manager + ganesha each) under a LocalPodRuntime; the
// reconciler's passes run back to back on `threads` threads, each over its own
// shares (as the controller's workers: one share on one worker at a time).
void LivePods(int pods, const std::vector<int>& thread_counts, double seconds,
              int64_t rpc_timeout_ms) {
  TempDir dir;
  auto runtime = bench::ValueOrAbort(
      controller::LocalPodRuntime::Open(controller::LocalPodRuntimeOptions{
          .share_manager_binary = testing_support::ShareManagerBinary(),
          .work_dir = dir.path,
          .daemon_flags = {"--grace-period", "2", "--lease-lifetime", "2", "--log-level", "warn"},
          .termination_grace = milliseconds(2000),
          .ephemeral = true}),
      "LocalPodRuntime Open");
  controller::GrpcShareConnector grpc(
      controller::ShareClientOptions{.deadline = milliseconds(rpc_timeout_ms)});
  TimedConnector connector(grpc);
  controller::MemoryStore store;
  controller::SystemWallClock wall;
  controller::SteadyMonotonicClock mono;
  controller::Reconciler reconciler(store, *runtime, connector, wall, mono);
  const auto names = bench::CreateShares(store, "live-", pods);
  auto running = [&] {
    return static_cast<int>(std::count_if(names.begin(), names.end(), [&](const auto& name) {
      return bench::ValueOrAbort(store.Get(name), "store Get").status().phase() == pb::RUNNING;
    }));
  };
  // Create the pods, then pass until every share is RUNNING.
  const auto started = Clock::now();
  while (running() < pods) {
    AbortIfInterrupted();
    if (Clock::now() - started > std::chrono::seconds(60 + 2 * pods)) {
      throw bench::AbortRun(absl::StrFormat("%d of %d shares RUNNING after %.0f s", running(), pods,
                                            bench::Ms(Clock::now() - started) / 1000));
    }
    for (const auto& name : names) reconciler.Reconcile(name);
    std::this_thread::sleep_for(milliseconds(50));
  }
  const double start_s = bench::Ms(Clock::now() - started) / 1000;
  PodMemory memory;
  for (const auto& name : names) {
    const auto pod = bench::ValueOrAbort(store.Get(name), "store Get").status().pod();
    const auto m = MemoryOf(bench::PidOrAbort(runtime->Pid(pod), "pod " + pod));
    memory.share_manager_kib += m.share_manager_kib;
    memory.ganesha_kib += m.ganesha_kib;
  }
  connector.Take();
  std::set<int> done;
  for (int wanted : thread_counts) {
    const int threads = std::clamp(wanted, 1, pods);
    if (!done.insert(threads).second) continue;  // more threads than pods: a row already taken
    std::atomic<uint64_t> passes{0}, failed{0};
    const auto start = Clock::now();
    const auto end =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        while (Clock::now() < end && !g_interrupted) {
          for (size_t i = static_cast<size_t>(t); i < names.size();
               i += static_cast<size_t>(threads)) {
            if (!reconciler.Reconcile(names[i]).error.ok()) ++failed;
            ++passes;
          }
        }
      });
    }
    for (auto& w : workers) w.join();
    AbortIfInterrupted();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const auto [lat, unanswered] = connector.Take();
    std::cout << absl::StrFormat(
        "| %d | %d | %d | %.0f | %.0f | %.3f ms | %.3f ms | %.3f ms | %d | %d | %d/%d |\n", pods,
        threads, passes.load(), static_cast<double>(passes.load()) / elapsed,
        elapsed * 1e6 * threads / static_cast<double>(std::max<uint64_t>(passes.load(), 1)),
        Percentile(lat, 0.5), Percentile(lat, 0.99), lat.empty() ? 0.0 : lat.back(), unanswered,
        failed.load(), running(), pods);
    std::cout.flush();
  }
  std::cout << absl::StrFormat(
      "|  | (%d pods: all RUNNING %.1f s after the first pass; PSS of the pods: share-managers "
      "%.1f "
      "MiB, ganeshas %.1f MiB) |\n",
      pods, start_s, static_cast<double>(memory.share_manager_kib) / 1024,
      static_cast<double>(memory.ganesha_kib) / 1024);
  std::cout.flush();
  runtime->Shutdown();  // every pod gone before the temp dir is removed
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  std::vector<int> sizes = {10, 1000, 100'000};
  double seconds = 3;
  int runs = 10;
  int64_t rpc_timeout_ms = 1000, grace_ms = 1000;
  std::vector<int> live_pods;
  std::vector<int> live_threads = {1, 4};
  CLI::App app{"controller benchmarks (see docs/BENCHMARKS.md)"};
  app.add_option("--shares", sizes, "Share counts for the passes/s table")->capture_default_str();
  app.add_option("--seconds", seconds, "Measuring time per share count")->capture_default_str();
  app.add_option("--e2e-runs", runs, "End-to-end runs per case (0: skip)")->capture_default_str();
  app.add_option("--rpc-timeout-ms", rpc_timeout_ms)->capture_default_str();
  app.add_option("--unhealthy-grace-ms", grace_ms)->capture_default_str();
  app.add_option("--live-pods", live_pods,
                 "Pod counts for the live passes/s table (real share-manager + ganesha per pod, "
                 "real GetStatus); when given, only that table runs")
      ->delimiter(',');
  app.add_option("--live-threads", live_threads, "Reconciling threads for the live table")
      ->delimiter(',')
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::cout << "## Controller benchmark\n";
  if (!live_pods.empty()) {
    struct sigaction sa {};
    sa.sa_handler = OnInterrupt;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    std::cout << "\n### Reconcile passes per second against live pods (" << seconds
              << " s per row, RPC deadline " << rpc_timeout_ms << " ms)\n\n"
              << "| live pods | threads | passes | passes/s | µs/pass per thread | GetStatus p50 "
                 "| p99 | max | not answered | failed passes | RUNNING after |\n"
              << "|---|---|---|---|---|---|---|---|---|---|---|\n";
    try {
      for (int n : live_pods) LivePods(n, live_threads, seconds, rpc_timeout_ms);
    } catch (const bench::AbortRun& e) {
      std::cerr << e.what() << "\n";
      return 1;
    }
    return 0;
  }
  PassesPerSecond(sizes, seconds);
  if (runs > 0) {
    try {
      EndToEnd("exited (SIGKILL)", runs, rpc_timeout_ms, grace_ms);
      EndToEnd("frozen", runs, rpc_timeout_ms, grace_ms);
    } catch (const bench::AbortRun& e) {
      std::cerr << e.what() << "\n";
      return 1;
    }
  }
  return 0;
}
