// What bench/k8s_bench.sh cannot time from a shell, against a share-manager
// pod on the test cluster's node (docs/BENCHMARKS.md "On a real node"):
//   kill-and-wait  SIGKILL a pid (ganesha's, on the node), then time until the
//                  pod's address answers an NFSv4 LOOKUP of the export again
//   tree           create (and stat) many files through NFS, as the memory
//                  benchmark's load
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <thread>

#include "supervisor/nfs_null_probe.h"
#include "tests/support/nfs_bulk.h"

namespace {

using Clock = std::chrono::steady_clock;

int KillAndWait(pid_t pid, const std::string& host, uint16_t port, const std::string& component,
                int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const auto killed = Clock::now();
  if (kill(pid, SIGKILL) != 0) {
    std::cerr << "kill " << pid << ": " << strerror(errno) << "\n";
    return 1;
  }
  // The old ganesha may still answer for a moment: wait until it is gone.
  while (kill(pid, 0) == 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  while (Clock::now() < deadline) {
    if (supervisor::ProbeNfsExport(host, port, component, base::Duration(200)).ok()) {
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - killed).count();
      std::cout << ms << "\n";
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::cerr << "no answer from " << host << ":" << port << " within " << timeout_ms << " ms\n";
  return 1;
}

int Tree(const std::string& host, uint16_t port, const std::string& export_path, int files) {
  testing_support::FileTree tree;
  tree.files = files;
  auto bulk = testing_support::NfsBulk::Connect(host, port, export_path);
  if (!bulk.ok()) {
    std::cerr << "connect: " << bulk.status() << "\n";
    return 1;
  }
  for (const auto& [what, status] :
       {std::pair{"create", (*bulk)->Create(tree)}, std::pair{"stat", (*bulk)->Stat(tree)}}) {
    if (!status.ok()) {
      std::cerr << what << ": " << status << "\n";
      return 1;
    }
  }
  std::cout << files << " files created and stat'ed\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"NFS load and timing against a share-manager pod (bench/k8s_bench.sh)"};
  app.require_subcommand(1);
  std::string host;
  uint16_t port = 2049;
  auto* kw = app.add_subcommand("kill-and-wait",
                                "SIGKILL PID, time until HOST answers a LOOKUP of COMPONENT");
  pid_t pid = 0;
  std::string component;
  int timeout_ms = 30'000;
  kw->add_option("--pid", pid)->required();
  kw->add_option("--host", host)->required();
  kw->add_option("--port", port)->capture_default_str();
  kw->add_option("--component", component, "the export's pseudo path without its '/'")->required();
  kw->add_option("--timeout-ms", timeout_ms)->capture_default_str();
  auto* tr = app.add_subcommand("tree", "create and stat --files files through NFS");
  std::string export_path;
  int files = 100'000;
  tr->add_option("--host", host)->required();
  tr->add_option("--port", port)->capture_default_str();
  tr->add_option("--export", export_path, "the export's pseudo path, e.g. /vol")->required();
  tr->add_option("--files", files)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (*kw) return KillAndWait(pid, host, port, component, timeout_ms);
  return Tree(host, port, export_path, files);
}
