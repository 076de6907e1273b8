// etcd benchmarks (issue #12, docs/BENCHMARKS.md), on a real 3-member etcd
// cluster on loopback started for the run:
//  1. reconcile passes per second on one thread with N shares, EtcdStore
//     beside MemoryStore (the peer) in the same run, and the etcd requests
//     each pass costs, counted by etcd itself (its /metrics);
//  2. etcd load at steady state per share, from etcd's own counters: the
//     controller (EtcdStore, resync every second, N shares RUNNING) and the
//     share-managers' serving leases (N real keepers, TTL 10 s).
// Run as: ./build/bench/etcd_bench [--shares 1000] [--seconds 10]
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/abort_run.h"
#include "bench/doctest_asserts_abort.h"
#include "bench/reconcile_passes.h"
#include "controller/core/controller.h"
#include "controller/store/etcd_store.h"
#include "controller/store/memory_store.h"
#include "controller/testing/simulated_runtime.h"
#include "sharemgr/etcd_lease_backend.h"
#include "sharemgr/serving_lease.h"
#include "tests/support/etcd_cluster.h"

namespace {

namespace pb = sharemanager::controller::v1;
using Clock = std::chrono::steady_clock;

// GET http://endpoint/metrics (plain HTTP/1.0, read to EOF).
std::string FetchMetrics(const std::string& endpoint) {
  const auto colon = endpoint.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(endpoint.substr(colon + 1), &port)) {
    throw bench::AbortRun("bad endpoint " + endpoint);
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &addr.sin_addr);
  std::string text;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: etcd\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[65536];
      for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;)
        text.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  if (text.find("grpc_server_msg_received_total") == std::string::npos) {
    throw bench::AbortRun("no gRPC counters at http://" + endpoint + "/metrics");
  }
  return text;
}

// Requests etcd received, by method, summed over the members: gRPC messages
// received (a unary call is one; each keep-alive on a stream is one).
std::map<std::string, double> RequestsByMethod(const testing_support::EtcdCluster& cluster) {
  std::map<std::string, double> out;
  for (const auto& endpoint : cluster.endpoints()) {
    std::istringstream lines(FetchMetrics(endpoint));
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("grpc_server_msg_received_total{", 0) != 0) continue;
      const auto method_at = line.find("grpc_method=\"");
      const auto value_at = line.rfind(' ');
      double value = 0;
      if (method_at == std::string::npos || value_at == std::string::npos ||
          !absl::SimpleAtod(line.substr(value_at + 1), &value)) {
        continue;
      }
      const auto start = method_at + 13;
      out[line.substr(start, line.find('"', start) - start)] += value;
    }
  }
  return out;
}

double Total(const std::map<std::string, double>& m) {
  double sum = 0;
  for (const auto& [method, n] : m) sum += n;
  return sum;
}

// What happened between two counter snapshots: "Range 2.0, Txn 1.0" per `per`.
std::string Breakdown(const std::map<std::string, double>& before,
                      const std::map<std::string, double>& after, double per) {
  std::string out;
  for (const auto& [method, n] : after) {
    const double delta = n - (before.count(method) ? before.at(method) : 0);
    if (delta <= 0) continue;
    out += absl::StrFormat("%s%s %.2f", out.empty() ? "" : ", ", method, delta / per);
  }
  return out.empty() ? "none" : out;
}

void Throughput(const testing_support::EtcdCluster& cluster, int shares, double seconds) {
  std::cout << "\n### Reconcile passes per second, " << shares
            << " shares, one thread (simulated pods)\n\n"
            << "| store | passes | passes/s | etcd requests per pass (by method) |\n"
            << "|---|---|---|---|\n";
  {
    controller::MemoryStore memory;
    const auto rate = bench::MeasurePasses(memory, shares, seconds);
    std::cout << absl::StrFormat("| MemoryStore | %d | %.0f | - |\n", rate.passes,
                                 rate.per_second());
  }
  auto client = std::shared_ptr<etcd::EtcdClient>(bench::ValueOrAbort(
      etcd::EtcdClient::Create({.endpoints = cluster.endpoints()}), "etcd client"));
  auto store =
      bench::ValueOrAbort(controller::EtcdStore::Open(client, "/bench-throughput"), "EtcdStore");
  std::map<std::string, double> before;
  const auto rate =
      bench::MeasurePasses(*store, shares, seconds, [&] { before = RequestsByMethod(cluster); });
  const auto after = RequestsByMethod(cluster);
  const double passes = static_cast<double>(rate.passes);
  std::cout << absl::StrFormat(
      "| EtcdStore (3 members, loopback) | %d | %.0f | %.2f (%s) |\n", rate.passes,
      rate.per_second(), (Total(after) - Total(before)) / passes, Breakdown(before, after, passes));
  std::cout.flush();
}

void SteadyLoad(const testing_support::EtcdCluster& cluster, int shares, double seconds) {
  std::cout << "\n### etcd load at steady state, " << shares << " shares (" << seconds
            << " s measured)\n\n"
            << "| who | etcd requests/s | per share | by method, per share per second |\n"
            << "|---|---|---|---|\n";
  auto client = std::shared_ptr<etcd::EtcdClient>(bench::ValueOrAbort(
      etcd::EtcdClient::Create({.endpoints = cluster.endpoints()}), "etcd client"));
  {
    // The controller: every share RUNNING, resync once a second (the default).
    auto store =
        bench::ValueOrAbort(controller::EtcdStore::Open(client, "/bench-steady"), "EtcdStore");
    bench::CreateShares(*store, "vol-", shares);
    controller::SimulatedCluster sim;
    controller::FakeWallClock wall;
    controller::ControllerOptions options;
    options.watch_health = false;  // simulated pods have no endpoint to watch
    controller::Controller ctl(*store, sim, sim, wall, options);
    if (auto s = ctl.Start(); !s.ok()) throw bench::AbortRun("controller: " + s.ToString());
    std::this_thread::sleep_for(std::chrono::seconds(5));  // every share RUNNING
    const auto before = RequestsByMethod(cluster);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    const auto after = RequestsByMethod(cluster);
    ctl.Stop();
    const double rate = (Total(after) - Total(before)) / seconds;
    std::cout << absl::StrFormat("| controller (EtcdStore, resync 1 s) | %.1f | %.3f | %s |\n",
                                 rate, rate / shares, Breakdown(before, after, seconds * shares));
  }
  {
    // The share-managers' serving leases: the daemon's keeper and backend.
    std::vector<std::unique_ptr<sharemgr::LeaseBackend>> backends;
    std::vector<std::unique_ptr<sharemgr::ServingLease>> leases;
    for (int i = 0; i < shares; ++i) {
      const sharemgr::LeaseConfig config{.endpoints = cluster.endpoints(),
                                         .prefix = "/bench-leases",
                                         .volume = "vol-" + std::to_string(i),
                                         .holder = "bench",
                                         .options = {.epoch = 1, .ttl = base::Duration(10'000)}};
      backends.push_back(bench::ValueOrAbort(
          sharemgr::MakeEtcdLeaseBackend(config, base::SteadyClock()), "lease backend"));
      leases.push_back(std::make_unique<sharemgr::ServingLease>(
          *backends.back(), base::SteadyClock(), config.options, sharemgr::ServingLease::Hooks{}));
      leases.back()->Start();
    }
    std::this_thread::sleep_for(std::chrono::seconds(5));  // every lease taken
    const auto before = RequestsByMethod(cluster);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    const auto after = RequestsByMethod(cluster);
    int held = 0;
    for (auto& lease : leases) held += lease->valid_until().has_value() ? 1 : 0;
    for (auto& lease : leases) lease->Stop(sharemgr::ServingLease::StopMode::kRevoke).IgnoreError();
    const double rate = (Total(after) - Total(before)) / seconds;
    std::cout << absl::StrFormat(
        "| share-managers' serving leases (TTL 10 s, %d of %d held) | %.1f | %.3f | %s |\n", held,
        shares, rate, rate / shares, Breakdown(before, after, seconds * shares));
  }
  std::cout.flush();
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  int shares = 1000, load_shares = 60;
  double seconds = 10;
  CLI::App app{
      "etcd benchmarks: reconcile throughput on EtcdStore, etcd load per share (see "
      "docs/BENCHMARKS.md); starts its own 3-member etcd on loopback"};
  app.add_option("--shares", shares, "Shares for the throughput table")->capture_default_str();
  app.add_option("--load-shares", load_shares, "Shares for the steady-state load table")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "Measuring time per row")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  const bench::DoctestAssertsAbort asserts_abort;
  try {
    testing_support::EtcdCluster cluster;
    std::cout << "## etcd benchmark (3 members on 127.0.0.1)\n";
    Throughput(cluster, shares, seconds);
    SteadyLoad(cluster, load_shares, seconds);
  } catch (const bench::AbortRun& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
