// Measures how fast a dead or hung ganesha is noticed and serving again under
// share-manager, and under s6-supervise and supervisord in the same run with
// the same ganesha config and the same probe (NFS NULL answered + a new file
// written through NFS). Also: a client call against a frozen share-manager,
// share-manager's RSS, and what --metrics-listen costs (crash -> SERVING,
// idle CPU and RSS with metrics on and off, side by side). Prints a Markdown
// report.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/abort_run.h"
#include "bench/peer_supervisors.h"
#include "bench/series.h"
#include "sharemgr/exit_codes.h"
#include "supervisor/nfs_null_probe.h"
#include "tests/support/daemon_process.h"
#include "tests/support/http_get.h"
#include "tests/support/nfs_client.h"

namespace {

namespace v1 = sharemanager::v1;
using Clock = std::chrono::steady_clock;
using bench::Ms;
using bench::Series;
using std::chrono::milliseconds;
using testing_support::DaemonProcess;

void PrintTable(const std::string& title, const std::vector<Series>& rows, int runs) {
  std::cout << "\n### " << title << " (" << runs << " runs)\n\n" << bench::Series::kHeader;
  for (const auto& r : rows) std::cout << r.Row() << "\n";
  std::cout.flush();
}

// Timestamps every WatchStatus message of one daemon.
class Watcher {
 public:
  explicit Watcher(const DaemonProcess& d) : stub_(d.Stub()) {
    thread_ = std::thread([this] {
      auto stream = stub_->WatchStatus(&context_, v1::WatchStatusRequest());
      v1::ShareStatus s;
      while (stream->Read(&s)) {
        std::lock_guard lock(mu_);
        seen_.push_back({Clock::now(), s});
        cv_.notify_all();
      }
      (void)stream->Finish();
    });
  }
  ~Watcher() {
    context_.TryCancel();
    thread_.join();
  }
  size_t Mark() {
    std::lock_guard lock(mu_);
    return seen_.size();
  }
  // Time of the first message at or after index `from` that matches.
  std::optional<Clock::time_point> WaitFor(size_t from,
                                           const std::function<bool(const v1::ShareStatus&)>& pred,
                                           milliseconds timeout) {
    std::unique_lock lock(mu_);
    std::optional<Clock::time_point> found;
    cv_.wait_for(lock, timeout, [&] {
      for (size_t i = from; i < seen_.size(); ++i) {
        if (pred(seen_[i].second)) {
          found = seen_[i].first;
          return true;
        }
      }
      return false;
    });
    return found;
  }

 private:
  std::unique_ptr<v1::ShareManager::Stub> stub_;
  grpc::ClientContext context_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<Clock::time_point, v1::ShareStatus>> seen_;
  std::thread thread_;
};

// The common probe: NULL answered, then a new file written through NFS.
struct ProbeTimes {
  std::optional<Clock::time_point> null_answered, written;
};
ProbeTimes ProbeUntilServing(uint16_t port, const std::string& pseudo, const std::string& file,
                             milliseconds cap) {
  ProbeTimes t;
  const auto deadline = Clock::now() + cap;
  while (Clock::now() < deadline && !t.null_answered) {
    if (supervisor::ProbeNfsNull("127.0.0.1", port, milliseconds(100)).ok()) {
      t.null_answered = Clock::now();
    } else {
      std::this_thread::sleep_for(milliseconds(2));
    }
  }
  while (t.null_answered && Clock::now() < deadline && !t.written) {
    if (testing_support::WriteOnce("127.0.0.1", port, pseudo, file, "x", milliseconds(500)).ok()) {
      t.written = Clock::now();
    } else {
      std::this_thread::sleep_for(milliseconds(2));
    }
  }
  return t;
}

// A field of /proc/PID/smaps_rollup in MiB: Rss, Pss, Private_Dirty, ...
double MemoryMiB(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/smaps_rollup"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return static_cast<double>(std::stol(line.substr(field.size() + 1))) / 1024.0;
    }
  }
  return -1;
}

// CPU time of every thread of `pid` so far, in ns (schedstat: exact, where
// /proc/PID/stat counts 10 ms ticks).
int64_t CpuNs(pid_t pid) {
  int64_t total = 0;
  std::error_code ignored;
  for (const auto& task :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ignored)) {
    std::ifstream in(task.path() / "schedstat");
    int64_t ns = 0;
    if (in >> ns) total += ns;
  }
  return total;
}

struct Options {
  int runs = 20;
  // The metrics part: crash runs per daemon, the idle window, the scrape period.
  int metrics_runs = 10;
  int idle_seconds = 30;
  int scrape_ms = 1000;
  int peer_hang_runs = 3;
  std::string probe_interval = "1s";
  int probe_failures = 3;
  // Between share-manager runs: longer than the restart policy's stable run
  // (10 s), so every crash is an isolated one, restarted without backoff.
  int settle_ms = 10'500;
  // Between peer runs: longer than the NFS lease, so no run waits out grace.
  int peer_settle_ms = 3000;
  int hang_cap_ms = 10'000;
};

std::unique_ptr<DaemonProcess> StartShareManager(const Options& o) {
  auto d =
      DaemonProcess::Start({.volume = "bench",
                            .extra_flags = {"--probe-interval", o.probe_interval,
                                            "--probe-failures", std::to_string(o.probe_failures),
                                            "--max-deaths", "1000", "--log-level", "info"}});
  return bench::ValueOrAbort(std::move(d), "share-manager did not start");
}

pid_t GaneshaPid(const DaemonProcess& d) {
  return bench::PidOrAbort(bench::ValueOrAbort(d.Status(), "GetStatus").ganesha_pid(), "ganesha");
}

void BenchShareManager(const Options& o) {
  auto d = StartShareManager(o);
  Watcher watch(*d);
  std::this_thread::sleep_for(milliseconds(o.settle_ms));

  Series detected("SIGKILL -> status leaves SERVING (WatchStatus)");
  Series serving("SIGKILL -> SERVING again (WatchStatus)");
  Series null_ok("SIGKILL -> NFS NULL answered");
  Series write_ok("SIGKILL -> first NFS write succeeds");
  for (int i = 0; i < o.runs; ++i) {
    const pid_t pid = GaneshaPid(*d);
    const size_t mark = watch.Mark();
    const auto start = Clock::now();
    kill(pid, SIGKILL);
    detected.Record(start, watch.WaitFor(
                               mark, [](const auto& s) { return s.state() != v1::SERVING; },
                               milliseconds(5000)));
    const auto probe = ProbeUntilServing(d->nfs_port(), d->pseudo_path(),
                                         absl::StrCat("/crash-", i), milliseconds(o.hang_cap_ms));
    serving.Record(start, watch.WaitFor(
                              mark,
                              [pid](const auto& s) {
                                return s.state() == v1::SERVING && s.ganesha_pid() != pid;
                              },
                              milliseconds(5000)));
    null_ok.Record(start, probe.null_answered);
    write_ok.Record(start, probe.written);
    std::this_thread::sleep_for(milliseconds(o.settle_ms));  // let client leases lapse
  }
  PrintTable("share-manager: ganesha crash (SIGKILL)", {detected, serving, null_ok, write_ok},
             o.runs);

  Series hang_detected("SIGSTOP -> hang detected (status leaves SERVING)");
  Series hang_serving("SIGSTOP -> SERVING again");
  Series hang_write("SIGSTOP -> first NFS write succeeds");
  for (int i = 0; i < o.runs; ++i) {
    const pid_t pid = GaneshaPid(*d);
    const size_t mark = watch.Mark();
    const auto start = Clock::now();
    kill(pid, SIGSTOP);
    hang_detected.Record(start, watch.WaitFor(
                                    mark, [](const auto& s) { return s.state() != v1::SERVING; },
                                    milliseconds(o.hang_cap_ms)));
    hang_serving.Record(start, watch.WaitFor(
                                   mark,
                                   [pid](const auto& s) {
                                     return s.state() == v1::SERVING && s.ganesha_pid() != pid;
                                   },
                                   milliseconds(o.hang_cap_ms)));
    const auto probe = ProbeUntilServing(d->nfs_port(), d->pseudo_path(), absl::StrCat("/hang-", i),
                                         milliseconds(o.hang_cap_ms));
    hang_write.Record(start, probe.written);
    std::this_thread::sleep_for(milliseconds(o.settle_ms));
  }
  PrintTable(absl::StrCat("share-manager: ganesha hang (SIGSTOP), probe ", o.probe_interval, " x ",
                          o.probe_failures),
             {hang_detected, hang_serving, hang_write}, o.runs);

  std::cout << "\n### Memory at steady state (after the runs above)\n\n"
            << "| process | RSS | PSS | private dirty |\n|---|---|---|---|\n";
  for (const auto& [name, pid] : {std::pair<std::string, pid_t>{"share-manager", d->pid()},
                                  {"ganesha.nfsd (for reference)", GaneshaPid(*d)}}) {
    std::cout << absl::StrFormat("| %s | %.1f MiB | %.1f MiB | %.1f MiB |\n", name,
                                 MemoryMiB(pid, "Rss"), MemoryMiB(pid, "Pss"),
                                 MemoryMiB(pid, "Private_Dirty"));
  }
}

// Scrapes GET /metrics every `period` until destroyed, as a Prometheus would.
class Scraper {
 public:
  Scraper(uint16_t port, milliseconds period)
      : thread_([this, port, period] {
          std::unique_lock lock(mu_);
          while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
            lock.unlock();
            const auto got = testing_support::HttpGet("127.0.0.1", port, "/metrics");
            lock.lock();
            (got.ok() && got->status == 200 ? scrapes_ : failures_)++;
          }
        }) {}
  ~Scraper() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::pair<int, int> counts() {
    std::lock_guard lock(mu_);
    return {scrapes_, failures_};
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int scrapes_ = 0;
  int failures_ = 0;
  std::thread thread_;
};

// Two share-managers side by side, one with --metrics-listen (scraped every
// --scrape-ms), one without: crash -> SERVING alternating between them, then
// their idle CPU over the same window, then their memory.
void BenchMetricsCost(const Options& o) {
  const uint16_t port = base::FreeLoopbackPort();
  const std::vector<std::string> common = {
      "--probe-interval", o.probe_interval, "--probe-failures", std::to_string(o.probe_failures),
      "--max-deaths",     "1000",           "--log-level",      "info"};
  std::vector<std::string> metered_flags = common;
  metered_flags.insert(metered_flags.end(), {"--metrics-listen", absl::StrCat("127.0.0.1:", port)});
  auto off =
      bench::ValueOrAbort(DaemonProcess::Start({.volume = "bench-off", .extra_flags = common}),
                          "share-manager (metrics off) did not start");
  auto on = bench::ValueOrAbort(
      DaemonProcess::Start({.volume = "bench-on", .extra_flags = metered_flags}),
      "share-manager (metrics on) did not start");
  Scraper scraper(port, milliseconds(o.scrape_ms));
  struct Side {
    const char* name;
    DaemonProcess* d;
    std::unique_ptr<Watcher> watch;
    Series serving;
  };
  Side sides[] = {{"off", off.get(), std::make_unique<Watcher>(*off),
                   Series("metrics off: SIGKILL -> SERVING again (WatchStatus)")},
                  {"on", on.get(), std::make_unique<Watcher>(*on),
                   Series("metrics on: SIGKILL -> SERVING again (WatchStatus)")}};
  // Each daemon's crashes are more than the 10 s stable run apart (no
  // backoff); the two alternate, so each waits half that between runs.
  const milliseconds pause(o.settle_ms / 2);
  std::this_thread::sleep_for(pause);
  for (int i = 0; i < o.metrics_runs; ++i) {
    for (Side& side : sides) {
      const pid_t pid = GaneshaPid(*side.d);
      const size_t mark = side.watch->Mark();
      const auto start = Clock::now();
      kill(pid, SIGKILL);
      side.serving.Record(start, side.watch->WaitFor(
                                     mark,
                                     [pid](const auto& s) {
                                       return s.state() == v1::SERVING && s.ganesha_pid() != pid;
                                     },
                                     milliseconds(5000)));
      std::this_thread::sleep_for(pause);
    }
  }
  PrintTable("--metrics-listen: ganesha crash (SIGKILL), metrics off and on alternating",
             {sides[0].serving, sides[1].serving}, o.metrics_runs);

  // Idle: both over the same window (the watchers stay connected, as a
  // controller's would; the scraper keeps scraping the metered one).
  const int64_t off_before = CpuNs(off->pid()), on_before = CpuNs(on->pid());
  const auto [scrapes_before, failures_before] = scraper.counts();
  const auto idle_start = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(o.idle_seconds));
  const double window_s = std::chrono::duration<double>(Clock::now() - idle_start).count();
  const double off_ms = static_cast<double>(CpuNs(off->pid()) - off_before) / 1e6;
  const double on_ms = static_cast<double>(CpuNs(on->pid()) - on_before) / 1e6;
  const auto [scrapes_after, failures_after] = scraper.counts();
  std::cout << absl::StrFormat(
      "\n### --metrics-listen: share-manager at idle (%.0f s, same window for both; "
      "the metered one scraped every %d ms: %d scrapes in it, %d failed)\n\n"
      "| share-manager | CPU in the window | CPU per second | RSS | PSS | private dirty |\n"
      "|---|---|---|---|---|---|\n",
      window_s, o.scrape_ms, scrapes_after - scrapes_before, failures_after - failures_before);
  for (const auto& [name, pid, cpu_ms] : {std::tuple{"metrics off", off->pid(), off_ms},
                                          std::tuple{"metrics on", on->pid(), on_ms}}) {
    std::cout << absl::StrFormat(
        "| %s | %.1f ms | %.3f ms/s (%.3f%% of a core) | %.1f MiB | %.1f MiB | %.1f MiB |\n", name,
        cpu_ms, cpu_ms / window_s, cpu_ms / window_s / 10.0, MemoryMiB(pid, "Rss"),
        MemoryMiB(pid, "Pss"), MemoryMiB(pid, "Private_Dirty"));
  }
  std::cout.flush();
}

void BenchFrozenPeer(const Options& o) {
  auto d = StartShareManager(o);
  const milliseconds deadline(1000);
  Series returned(
      "GetStatus (1 s deadline) against a SIGSTOPped share-manager -> DEADLINE_EXCEEDED");
  Series cli("`share-manager status --timeout 1s` against it -> exit code 2 (whole process)");
  d->Signal(SIGSTOP);
  for (int i = 0; i < o.runs; ++i) {
    auto channel = grpc::CreateChannel(d->addr(), grpc::InsecureChannelCredentials());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    v1::ShareStatus status;
    const auto start = Clock::now();
    const auto rpc = v1::ShareManager::NewStub(channel)->GetStatus(&context, {}, &status);
    const auto end = Clock::now();
    // Only the answer the README promises counts; any other outcome is a miss.
    if (rpc.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      returned.misses++;
    } else {
      returned.values.push_back(Ms(end - start));
    }
    const auto result = testing_support::RunCommand(
        {testing_support::ShareManagerBinary(), "status", "--addr", d->addr(), "--timeout", "1s"});
    if (result.exit_code != sharemgr::kClientUnreachable) {
      cli.misses++;
    } else {
      cli.values.push_back(static_cast<double>(result.elapsed.count()));
    }
  }
  d->Signal(SIGCONT);
  PrintTable("Frozen share-manager (SIGSTOP): client calls", {returned, cli}, o.runs);
}

void BenchPeer(bench::PeerKind kind, const Options& o) {
  char tmpl[] = "/tmp/sharemgr-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw bench::AbortRun("mkdtemp failed");
  const uint16_t port = base::FreeLoopbackPort();
  auto peer = bench::PeerSupervisor::Start(kind, tmpl, "bench", port);
  if (!peer.ok()) throw bench::AbortRun(peer.status().ToString());
  const std::string name = bench::PeerName(kind);
  if (!ProbeUntilServing(port, "/bench", "/warmup", milliseconds(15'000)).written) {
    throw bench::AbortRun(name + ": ganesha never served");
  }
  std::this_thread::sleep_for(milliseconds(o.peer_settle_ms));
  Series null_ok("SIGKILL -> NFS NULL answered");
  Series write_ok("SIGKILL -> first NFS write succeeds");
  for (int i = 0; i < o.runs; ++i) {
    const pid_t pid = bench::PidOrAbort((*peer)->GaneshaPid(), name + "'s ganesha");
    const auto start = Clock::now();
    kill(pid, SIGKILL);
    // The port closes with the process; wait for that so the probe sees the new one.
    while (supervisor::ProbeNfsNull("127.0.0.1", port, milliseconds(100)).ok() &&
           Clock::now() - start < milliseconds(2000)) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    const auto probe =
        ProbeUntilServing(port, "/bench", absl::StrCat("/crash-", i), milliseconds(o.hang_cap_ms));
    null_ok.Record(start, probe.null_answered);
    write_ok.Record(start, probe.written);
    std::this_thread::sleep_for(milliseconds(o.peer_settle_ms));
  }
  PrintTable(absl::StrCat(name, ": ganesha crash (SIGKILL)"), {null_ok, write_ok}, o.runs);

  Series hang_write(absl::StrCat("SIGSTOP -> first NFS write succeeds (gave up after ",
                                 o.hang_cap_ms / 1000, " s)"));
  for (int i = 0; i < o.peer_hang_runs; ++i) {
    const pid_t pid = bench::PidOrAbort((*peer)->GaneshaPid(), name + "'s ganesha");
    const auto start = Clock::now();
    kill(pid, SIGSTOP);
    const auto probe =
        ProbeUntilServing(port, "/bench", absl::StrCat("/hang-", i), milliseconds(o.hang_cap_ms));
    hang_write.Record(start, probe.written);
    kill(pid, SIGCONT);  // the peer never noticed; resume it for the next run
    std::this_thread::sleep_for(milliseconds(o.peer_settle_ms));
  }
  PrintTable(absl::StrCat(name, ": ganesha hang (SIGSTOP)"), {hang_write}, o.peer_hang_runs);
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  Options o;
  CLI::App app{"share-manager recovery benchmark (see docs/BENCHMARKS.md)"};
  app.add_option("--runs", o.runs, "Runs per crash/hang measurement")->capture_default_str();
  app.add_option("--peer-hang-runs", o.peer_hang_runs,
                 "Hang runs for s6/supervisord (each waits out --hang-cap-ms)")
      ->capture_default_str();
  app.add_option("--probe-interval", o.probe_interval)->capture_default_str();
  app.add_option("--probe-failures", o.probe_failures)->capture_default_str();
  app.add_option("--settle-ms", o.settle_ms,
                 "Pause between share-manager runs (> its 10 s stable run, so no backoff)")
      ->capture_default_str();
  app.add_option("--peer-settle-ms", o.peer_settle_ms,
                 "Pause between s6/supervisord runs (> NFS lease, so no grace)")
      ->capture_default_str();
  app.add_option("--hang-cap-ms", o.hang_cap_ms)->capture_default_str();
  app.add_option("--metrics-runs", o.metrics_runs,
                 "metrics part: crash runs per share-manager (metrics off, on)")
      ->capture_default_str();
  app.add_option("--idle-seconds", o.idle_seconds, "metrics part: the idle CPU window")
      ->capture_default_str();
  app.add_option("--scrape-ms", o.scrape_ms,
                 "metrics part: how often the metered share-manager is scraped")
      ->capture_default_str();
  std::vector<std::string> only;
  app.add_option("--only", only, "Run just these parts (repeatable; default: all)")
      ->check(CLI::IsMember({"share-manager", "metrics", "frozen-peer", "s6", "supervisord"}));
  CLI11_PARSE(app, argc, argv);
  auto wanted = [&only](const std::string& part) {
    return only.empty() || std::find(only.begin(), only.end(), part) != only.end();
  };

  std::cout << "## Recovery benchmark\n\nganesha grace = lease = 2 s for every supervisor; "
               "probe = NFS NULL answered, then a new file created and written via libnfs.\n";
  try {
    if (wanted("share-manager")) BenchShareManager(o);
    if (wanted("metrics")) BenchMetricsCost(o);
    if (wanted("frozen-peer")) BenchFrozenPeer(o);
    if (wanted("s6")) BenchPeer(bench::PeerKind::kS6, o);
    if (wanted("supervisord")) BenchPeer(bench::PeerKind::kSupervisord, o);
  } catch (const bench::AbortRun& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
