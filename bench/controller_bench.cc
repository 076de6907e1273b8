// Controller benchmarks (docs/BENCHMARKS.md):
//  1. reconcile passes per second on one thread, MemoryStore + simulated
//     cluster, for growing numbers of shares (steady state: every share RUNNING);
//  2. end to end with real processes (LocalPodRuntime, share-manager, ganesha):
//     share-manager exit or freeze -> status ERROR -> new pod RUNNING -> first
//     successful NFS write.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <thread>

#include "absl/strings/str_format.h"
#include "bench/abort_run.h"
#include "bench/series.h"
#include "controller/controller.h"
#include "controller/grpc_share_connector.h"
#include "controller/local_pod_runtime.h"
#include "controller/memory_store.h"
#include "controller/reconciler.h"
#include "controller/simulated_runtime.h"
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
    controller::SimulatedCluster cluster;
    controller::FakeWallClock clock;
    controller::Reconciler reconciler(store, cluster, cluster, clock, clock);
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) {
      pb::ShareRecord r;
      r.set_name("vol-" + std::to_string(i));
      r.mutable_spec()->set_volume(r.name());
      r.mutable_spec()->set_serve(true);
      bench::ValueOrAbort(store.Create(r), "store Create");
      names.push_back(r.name());
    }
    for (int round = 0; round < 3; ++round) {  // create pods, observe them serving
      for (const auto& name : names) reconciler.Reconcile(name);
    }
    uint64_t passes = 0;
    const auto start = Clock::now();
    const auto end =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    while (Clock::now() < end) {
      for (size_t i = 0; i < names.size() && (i % 64 != 0 || Clock::now() < end); ++i) {
        reconciler.Reconcile(names[i]);
        ++passes;
      }
    }
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    std::cout << absl::StrFormat("| %d | %d | %.0f | %.2f |\n", n, passes,
                                 static_cast<double>(passes) / elapsed,
                                 elapsed * 1e6 / static_cast<double>(passes));
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

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  std::vector<int> sizes = {10, 1000, 100'000};
  double seconds = 3;
  int runs = 10;
  int64_t rpc_timeout_ms = 1000, grace_ms = 1000;
  CLI::App app{"controller benchmarks (see docs/BENCHMARKS.md)"};
  app.add_option("--shares", sizes, "Share counts for the passes/s table")->capture_default_str();
  app.add_option("--seconds", seconds, "Measuring time per share count")->capture_default_str();
  app.add_option("--e2e-runs", runs, "End-to-end runs per case (0: skip)")->capture_default_str();
  app.add_option("--rpc-timeout-ms", rpc_timeout_ms)->capture_default_str();
  app.add_option("--unhealthy-grace-ms", grace_ms)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::cout << "## Controller benchmark\n";
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
