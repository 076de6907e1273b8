// ganesha's memory after many files (docs/BENCHMARKS.md): a real share-manager
// and ganesha, 100,000 files created, stat'ed and listed through NFS (libnfs,
// one process), ganesha's RSS read from /proc after each step, with
// share-manager's default cache limits and with ganesha's stock caches.
#include <CLI/CLI.hpp>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/byte_size.h"
#include "base/proc.h"
#include "bench/abort_run.h"
#include "tests/support/daemon_process.h"
#include "tests/support/nfs_bulk.h"
#include "tests/support/peak_rss.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::string name;
  std::vector<std::string> flags;
};

// ganesha's RSS now.
std::string Rss(pid_t pid) {
  const auto usage = base::ReadProcessUsage(pid);
  if (!usage) throw bench::AbortRun("ganesha is gone");
  return base::FormatBytes(usage->rss_bytes);
}

std::string Seconds(Clock::duration d) {
  return absl::StrFormat("%.1f s", std::chrono::duration<double>(d).count());
}

// One row: RSS idle, after each step, at its peak; the steps' times; fds and threads.
std::string Run(const Config& config, const testing_support::FileTree& tree, int connections) {
  std::vector<std::string> flags = {"--log-level", "warn"};
  flags.insert(flags.end(), config.flags.begin(), config.flags.end());
  auto d = bench::ValueOrAbort(
      testing_support::DaemonProcess::Start({.volume = "bench", .extra_flags = flags}),
      "start share-manager");
  const pid_t ganesha = bench::ValueOrAbort(d->Status(), "GetStatus").ganesha_pid();
  const std::string idle = Rss(ganesha);
  auto bulk = bench::ValueOrAbort(
      testing_support::NfsBulk::Connect("127.0.0.1", d->nfs_port(), d->pseudo_path(), connections),
      "connect");
  std::vector<std::string> cells = {config.name, idle};
  std::vector<std::string> times;
  const std::vector<std::pair<const char*, std::function<absl::Status()>>> steps = {
      {"create", [&] { return bulk->Create(tree); }},
      {"stat", [&] { return bulk->Stat(tree); }},
      {"list", [&] { return bulk->List(tree).status(); }},
  };
  for (const auto& [what, step] : steps) {
    const auto t0 = Clock::now();
    if (const auto s = step(); !s.ok())
      throw bench::AbortRun(absl::StrCat(what, ": ", s.ToString()));
    times.push_back(Seconds(Clock::now() - t0));
    cells.push_back(Rss(ganesha));
  }
  const auto usage = base::ReadProcessUsage(ganesha);
  const auto status = bench::ValueOrAbort(d->Status(), "GetStatus");
  if (status.ganesha_pid() != ganesha) throw bench::AbortRun("ganesha was restarted meanwhile");
  const auto peak = testing_support::PeakRssBytes(ganesha);
  if (!peak) throw bench::AbortRun("cannot read ganesha's VmHWM");
  cells.push_back(base::FormatBytes(*peak));
  cells.insert(cells.end(), times.begin(), times.end());
  cells.push_back(absl::StrCat(usage ? usage->open_fds : -1));
  cells.push_back(absl::StrCat(usage ? usage->threads : -1));
  return absl::StrCat("| ", absl::StrJoin(cells, " | "), " |\n");
}

}  // namespace

int main(int argc, char** argv) {
  testing_support::FileTree tree;
  int connections = 16;
  int runs = 1;
  std::string only;
  CLI::App app{
      "ganesha's RSS after many files, with and without share-manager's cache limits "
      "(see docs/BENCHMARKS.md)"};
  app.add_option("--files", tree.files, "Files created, stat'ed and listed")->capture_default_str();
  app.add_option("--per-dir", tree.per_dir, "Files per directory")->capture_default_str();
  app.add_option("--connections", connections, "NFS connections (one call in flight on each)")
      ->capture_default_str();
  app.add_option("--runs", runs, "Runs per configuration")->capture_default_str();
  app.add_option("--only", only, "One configuration: defaults or stock")
      ->check(CLI::IsMember({"defaults", "stock"}));
  CLI11_PARSE(app, argc, argv);

  std::vector<Config> configs = {
      {"share-manager's defaults", {}},
      {"ganesha's stock caches",
       {"--ganesha-cache-entries", "0", "--ganesha-dir-chunks", "0", "--ganesha-dir-chunk-entries",
        "0", "--ganesha-max-clients", "0", "--ganesha-max-connections", "0"}},
  };
  if (!only.empty()) configs.erase(configs.begin() + (only == "defaults" ? 1 : 0));
  try {
    std::cout << "## ganesha memory benchmark (" << tree.files << " files in directories of "
              << tree.per_dir << ", " << connections << " NFS connections)\n\n"
              << "| caches | RSS idle | after create | after stat | after list | peak RSS "
                 "(VmHWM) | create | stat | list | fds | threads |\n"
              << "|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (int run = 0; run < runs; ++run) {
      for (const auto& config : configs) std::cout << Run(config, tree, connections) << std::flush;
    }
  } catch (const bench::AbortRun& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
