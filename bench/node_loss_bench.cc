// Node loss -> replacement serving (issue #12), run after run: the scenario
// of tests/support/node_loss.h (the share-manager's network namespace cut
// off while clients write, epoch+1 started on the host at the cut), timed
// from the share-managers' logs and the client's acknowledgements, next to
// the failover formula of docs/DESIGN-NOTES.md "Serving lease". See docs/BENCHMARKS.md.
#include <doctest/doctest.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "bench/abort_run.h"
#include "bench/doctest_asserts_abort.h"
#include "bench/series.h"
#include "sharemgr/serving_lease.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/loop_device.h"
#include "tests/support/net_namespace.h"
#include "tests/support/node_loss.h"

namespace {

using testing_support::NodeLossRun;

constexpr int kOld = 0, kNew = 1;

void Record(bench::Series& series, absl::Time from, std::optional<absl::Time> to) {
  if (to) {
    series.values.push_back(absl::ToDoubleMilliseconds(*to - from));
  } else {
    ++series.misses;
  }
}

// What a run broke of the safety properties the node loss test checks.
std::string Violations(const NodeLossRun& run) {
  std::string out;
  if (!run.new_served) absl::StrAppend(&out, " the new one never served;");
  if (!run.old_fenced || !run.new_taken || *run.old_fenced >= *run.new_taken) {
    absl::StrAppend(&out, " old not fenced before the new took the lease;");
  }
  if (run.new_taken && run.AcksAfter(kOld, *run.new_taken) > 0) {
    absl::StrAppend(&out, " old acknowledged writes after the new took the lease;");
  }
  if (run.old_mounted_when_new_served) absl::StrAppend(&out, " volume mounted by both;");
  if (!run.lost.empty()) absl::StrAppend(&out, " ", run.lost.size(), " acknowledged writes lost;");
  if (run.old_ganesha_starts != 1) absl::StrAppend(&out, " old ganesha started again;");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  int runs = 10;
  std::string ttl = "10s";
  CLI::App app{
      "node loss benchmark: a share-manager's network namespace cut off while clients write, "
      "epoch+1 on the host takes over (see docs/BENCHMARKS.md); starts its own 3-member etcd"};
  app.add_option("--runs", runs, "Runs")->capture_default_str();
  app.add_option("--ttl", ttl, "--lease-ttl of both share-managers")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  const bench::DoctestAssertsAbort asserts_abort;
  const auto parsed_ttl = base::ParseDuration(ttl);
  if (!parsed_ttl.ok()) {
    std::cerr << "bad --ttl: " << parsed_ttl.status() << "\n";
    return 1;
  }
  const absl::Duration ttl_d = absl::FromChrono(*parsed_ttl);
  const absl::Duration margin = absl::FromChrono(sharemgr::LeaseFenceMargin(*parsed_ttl));
  const absl::Duration drift = absl::FromChrono(sharemgr::DefaultLeaseDriftMargin(*parsed_ttl));
  const absl::Duration renew = ttl_d / 3;
  try {
    const testing_support::NetNamespace node;
    testing_support::EtcdCluster cluster({.also_listen_on = node.host_address()});
    auto volume =
        bench::ValueOrAbort(testing_support::LoopDevice::Create("64M", "ext4"), "loop device");
    bench::Series fenced("cut -> old fenced (its NFS stops)"), taken("cut -> new took the lease"),
        serving("cut -> new SERVING"),
        gap("last write acknowledged by the old -> first by the new");
    int unsafe = 0;
    std::cout << absl::StrFormat(
        "## node loss benchmark: %d runs, TTL %s (renewed every %.3f s, fence margin %.1f s, "
        "drift margin %.1f s)\n\n| run | cut after a renewal | fenced | taken | serving | gap | "
        "acks | safety |\n|---|---|---|---|---|---|---|---|\n",
        runs, ttl, absl::ToDoubleSeconds(renew), absl::ToDoubleSeconds(margin),
        absl::ToDoubleSeconds(drift));
    for (int i = 0; i < runs; ++i) {
      // Cut at evenly spread phases of the renewal interval: the old one's
      // remaining validity, and so everything after, depends on it.
      const absl::Duration phase = renew * i / runs;
      const NodeLossRun run =
          testing_support::RunNodeLoss({.node = node, .cluster = cluster, .volume = *volume},
                                       {.old_epoch = static_cast<uint64_t>(2 * i + 1),
                                        .ttl = ttl,
                                        .old_failed_linger = "1s",
                                        .cut_after_renewal = phase,
                                        .after_heal = absl::Seconds(1)});
      Record(fenced, run.cut, run.old_fenced);
      Record(taken, run.cut, run.new_taken);
      Record(serving, run.cut, run.new_serving);
      const auto last_old = run.LastAck(kOld);
      Record(gap, last_old.value_or(run.cut), run.FirstAck(kNew));
      const std::string violations = Violations(run);
      unsafe += violations.empty() ? 0 : 1;
      const auto ms = [&](std::optional<absl::Time> t) {
        return t ? absl::StrFormat("%.0f ms", absl::ToDoubleMilliseconds(*t - run.cut))
                 : std::string("-");
      };
      std::cout << absl::StrFormat(
                       "| %d | %.0f ms | %s | %s | %s | %s | %d | %s |", i + 1,
                       absl::ToDoubleMilliseconds(phase), ms(run.old_fenced), ms(run.new_taken),
                       ms(run.new_serving),
                       last_old && run.FirstAck(kNew)
                           ? absl::StrFormat("%.0f ms", absl::ToDoubleMilliseconds(
                                                            *run.FirstAck(kNew) - *last_old))
                           : std::string("-"),
                       run.acks.size(), violations.empty() ? "ok" : violations)
                << std::endl;
    }
    std::cout << "\n" << bench::Series::kHeader;
    for (const auto* s : {&fenced, &taken, &serving, &gap}) std::cout << s->Row() << "\n";
    std::cout << absl::StrFormat(
        "\nformula (README \"Failover after a node is lost\"), cut at a renewal phase p in "
        "[0, %.2f s): old fenced at TTL - margin - p = %.2f..%.2f s; etcd frees the lease at "
        "TTL - p = %.2f..%.2f s; new serving after that + drift margin %.1f s + watch latency + "
        "start (mount, ganesha, grace) <= %.2f s + start\nruns breaking a safety check: %d\n",
        absl::ToDoubleSeconds(renew), absl::ToDoubleSeconds(ttl_d - margin - renew),
        absl::ToDoubleSeconds(ttl_d - margin), absl::ToDoubleSeconds(ttl_d - renew),
        absl::ToDoubleSeconds(ttl_d), absl::ToDoubleSeconds(drift),
        absl::ToDoubleSeconds(ttl_d + drift), unsafe);
    return unsafe == 0 ? 0 : 1;
  } catch (const bench::AbortRun& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
