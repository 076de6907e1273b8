#include "tests/support/node_loss.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "base/unique_fd.h"
#include "supervisor/nfs_null_probe.h"
#include "tests/support/count_occurrences.h"
#include "tests/support/daemon_log.h"
#include "tests/support/daemon_process.h"
#include "tests/support/nfs_client.h"
#include "tests/support/require_ok.h"
#include "tests/support/wait_for.h"

namespace testing_support {
namespace {

using std::chrono::milliseconds;
constexpr int kOld = 0, kNew = 1;

std::string RecordName(int number) { return absl::StrCat("record-", number); }

// The client: one thread per server it knows of, each writing the next
// numbered record (a fresh NFS connection per write, as a client reconnects
// to whichever server answers) again and again until stopped. A record whose
// write failed is not written again: only acknowledged ones must survive.
class RecordWriter {
 public:
  RecordWriter() = default;
  ~RecordWriter() { Stop(); }
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  // Called by the owner only (threads_ is not shared with the writers).
  // With `netns`, the thread writes from inside that network namespace (a
  // client on the same side of the cut as the server: setns moves only the
  // calling thread).
  void AddServer(int server, const DaemonProcess& d, const std::string& netns = "") {
    threads_.emplace_back([this, server, netns, address = d.address(), port = d.nfs_port(),
                           export_path = d.pseudo_path()] {
      if (!netns.empty()) {
        const base::UniqueFd fd(open(netns.c_str(), O_RDONLY | O_CLOEXEC));
        if (fd.get() < 0 || setns(fd.get(), CLONE_NEWNET) != 0) return;  // it never acks
      }
      while (!stop_) {
        const int number = next_++;
        const std::string name = RecordName(number);
        const auto written =
            WriteOnce(address, port, export_path, "/" + name, name, milliseconds(1000));
        if (written.ok()) {
          const absl::Time at = absl::Now();
          absl::MutexLock lock(&mu_);
          acks_.push_back({number, server, at, !netns.empty()});
        }
        std::this_thread::sleep_for(milliseconds(20));
      }
    });
  }
  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  std::vector<NodeLossRun::Ack> acks() const {
    absl::MutexLock lock(&mu_);
    return acks_;
  }
  int AckCount(int server, bool from_node = false) const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(std::count_if(acks_.begin(), acks_.end(), [&](const auto& a) {
      return a.server == server && a.from_node == from_node;
    }));
  }

 private:
  std::atomic<int> next_{0};
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  std::vector<NodeLossRun::Ack> acks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

// Watches /proc/self/mounts every few milliseconds, on its own thread, for
// the two servers' export dirs mounted at the same time (one filesystem
// mounted twice: two writers of one ext4).
class OverlapWatch {
 public:
  OverlapWatch(std::string a, std::string b)
      : thread_([this, a = std::move(a), b = std::move(b)] {
          while (!stop_) {
            if (!MountSourceOf(a).empty() && !MountSourceOf(b).empty()) overlap_ = true;
            std::this_thread::sleep_for(milliseconds(5));
          }
        }) {}
  ~OverlapWatch() { Stop(); }
  OverlapWatch(const OverlapWatch&) = delete;
  OverlapWatch& operator=(const OverlapWatch&) = delete;

  // Whether they were seen mounted together, up to now.
  bool Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return overlap_;
  }

 private:
  std::atomic<bool> stop_{false}, overlap_{false};
  std::thread thread_;
};

// The longest a lease wait and a start may take, from the cut.
milliseconds Patience(const std::string& ttl) {
  const auto parsed = base::ParseDuration(ttl);
  REQUIRE_MESSAGE(parsed.ok(), "bad TTL ", ttl);
  return std::chrono::duration_cast<milliseconds>(*parsed) * 3 + milliseconds(30'000);
}

}  // namespace

std::optional<absl::Time> NodeLossRun::LastAck(int server) const {
  std::optional<absl::Time> last;
  for (const auto& a : acks) {
    if (a.server == server && (!last || a.at > *last)) last = a.at;
  }
  return last;
}

std::optional<absl::Time> NodeLossRun::FirstAck(int server) const {
  std::optional<absl::Time> first;
  for (const auto& a : acks) {
    if (a.server == server && (!first || a.at < *first)) first = a.at;
  }
  return first;
}

int NodeLossRun::AcksAfter(int server, absl::Time t) const {
  return static_cast<int>(std::count_if(
      acks.begin(), acks.end(), [&](const Ack& a) { return a.server == server && a.at > t; }));
}

NodeLossRun RunNodeLoss(const NodeLossSetup& setup, const NodeLossOptions& options) {
  NodeLossRun run;
  const milliseconds patience = Patience(options.ttl);
  const std::vector<std::string> volume = {"--device", setup.volume.path(), "--fs", "ext4"};

  std::vector<std::string> old_flags = volume;
  old_flags.insert(old_flags.end(),
                   {"--epoch", std::to_string(options.old_epoch), "--lease-etcd",
                    absl::StrJoin(setup.cluster.endpoints_on_also_listen(), ","), "--lease-ttl",
                    options.ttl, "--failed-linger", options.old_failed_linger});
  old_flags.insert(old_flags.end(), options.old_flags.begin(), options.old_flags.end());
  auto old_server = RequireOk(DaemonProcess::Start({.extra_flags = old_flags,
                                                    .wrapper = setup.node.NetworkOnlyWrapper(),
                                                    .address = setup.node.address()}));

  // Two writers to the old server: one from the host (cut off with the
  // node), one on the node itself (it still reaches the old server after the
  // cut: what it gets acknowledged then is what fencing must prevent).
  RecordWriter client;
  client.AddServer(kOld, *old_server);
  client.AddServer(kOld, *old_server, setup.node.path());
  REQUIRE_MESSAGE(
      WaitFor([&] { return client.AckCount(kOld) >= 5 && client.AckCount(kOld, true) >= 5; },
              milliseconds(20'000)),
      old_server->output());
  const size_t renewals = CountOccurrences(old_server->output(), kLeaseRenewedLine);
  REQUIRE_MESSAGE(
      WaitFor([&] { return CountOccurrences(old_server->output(), kLeaseRenewedLine) > renewals; },
              patience),
      old_server->output());
  std::this_thread::sleep_for(absl::ToChronoMilliseconds(options.cut_after_renewal));

  setup.node.Cut();
  run.cut = absl::Now();
  // The replacement starts at once, as a controller that saw the node go
  // would start it; it waits for the serving lease itself.
  std::vector<std::string> new_flags = volume;
  new_flags.insert(new_flags.end(),
                   {"--epoch", std::to_string(options.old_epoch + 1), "--lease-etcd",
                    absl::StrJoin(setup.cluster.endpoints(), ","), "--lease-ttl", options.ttl});
  auto new_server =
      RequireOk(DaemonProcess::Start({.extra_flags = new_flags, .wait_until_serving = false}));
  OverlapWatch overlap(old_server->export_dir(), new_server->export_dir());
  client.AddServer(kNew, *new_server);

  // Not REQUIREd: a replacement kept out (by an old one that never fenced,
  // still holding the device) is for the caller to report with the rest.
  run.new_served = new_server->WaitServing(patience).ok() &&
                   WaitFor([&] { return client.AckCount(kNew) >= 5; }, patience);
  run.old_mounted_when_new_served = overlap.Stop();

  setup.node.Heal();
  run.healed = absl::Now();
  // Reachable again: it must stay fenced (its renewals now reach etcd).
  if (const auto status = old_server->Status(); status.ok()) {
    run.old_state_after_heal = sharemanager::v1::ShareState_Name(status->state());
  }
  std::this_thread::sleep_for(absl::ToChronoMilliseconds(options.after_heal));
  run.old_nfs_answered_after_heal =
      supervisor::ProbeNfsNull(setup.node.address(), old_server->nfs_port(), base::Duration(500))
          .ok();
  client.Stop();
  run.acks = client.acks();

  // Every acknowledged record, read back through the new server.
  auto reader = NfsClient::Connect("127.0.0.1", new_server->nfs_port(), new_server->pseudo_path());
  if (!reader.ok()) run.lost.push_back("none read: " + reader.status().ToString());
  for (const auto& ack : reader.ok() ? run.acks : std::vector<NodeLossRun::Ack>{}) {
    const std::string name = RecordName(ack.number);
    const auto read = (*reader)->ReadFile("/" + name);
    if (!read.ok() || *read != name) {
      run.lost.push_back(
          absl::StrCat(name, ": ", read.ok() ? *read : std::string(read.status().message())));
    }
  }
  reader = absl::UnavailableError("done");  // disconnected

  if (options.wait_old_exit) {
    if (const auto code = old_server->WaitExit(patience); code.ok()) run.old_exit_code = *code;
    run.old_left_processes = !WaitFor(
        [&] { return ProcessesMentioning(old_server->state_dir()).empty(); }, milliseconds(5000));
  }
  run.old_log = old_server->output();
  run.new_log = new_server->output();
  run.old_ganesha_starts = static_cast<int>(CountOccurrences(run.old_log, "started ganesha pid"));
  run.old_valid_until = LoggedValidUntil(run.old_log);
  run.old_fenced = LoggedAt(run.old_log, "-> FAILED: lease lost");
  run.old_unmounted = LoggedAt(run.old_log, "unmounted " + old_server->export_dir());
  run.new_taken = LoggedAt(
      run.new_log, absl::StrCat("serving lease of epoch ", options.old_epoch + 1, " taken"));
  run.new_mounted = LoggedAt(run.new_log, "mounted " + setup.volume.path());
  run.new_serving = LoggedAt(run.new_log, "-> SERVING");
  return run;
}

}  // namespace testing_support
