// The controller end to end with real processes: LocalPodRuntime runs real
// share-manager daemons (and so real ganesha), a libnfs client keeps writing
// new files, and the share-manager is made to give up or is frozen.
#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "base/files.h"
#include "base/loopback_port.h"
#include "base/proc.h"
#include "controller/core/controller.h"
#include "controller/runtime/grpc_share_connector.h"
#include "controller/runtime/local/local_pod_runtime.h"
#include "controller/store/etcd_store.h"
#include "controller/store/memory_store.h"
#include "tests/support/daemon_process.h"
#include "tests/support/etcd_cluster.h"
#include "tests/support/http_get.h"
#include "tests/support/json_lines.h"
#include "tests/support/make_loop.h"
#include "tests/support/metrics_scrape.h"
#include "tests/support/nfs_client.h"
#include "tests/support/program_process.h"
#include "tests/support/require_ok.h"
#include "tests/support/slow_fsck.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_for.h"

namespace controller {
namespace {

namespace pb = sharemanager::controller::v1;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing_support::KillPid;
using testing_support::RequireOk;

constexpr char kVolume[] = "vol-e2e";

struct Cluster {
  // `extra_daemon_flags`: e.g. a block device for every pod.
  explicit Cluster(std::vector<std::string> extra_daemon_flags = {}) {
    std::vector<std::string> daemon_flags = {
        "--grace-period",  "2",     "--lease-lifetime", "2",     "--max-deaths",   "1",
        "--failed-linger", "200ms", "--probe-interval", "200ms", "--stop-timeout", "2s",
        "--log-level",     "debug"};
    daemon_flags.insert(daemon_flags.end(), extra_daemon_flags.begin(), extra_daemon_flags.end());
    auto opened = LocalPodRuntime::Open(
        LocalPodRuntimeOptions{.share_manager_binary = testing_support::ShareManagerBinary(),
                               .work_dir = dir,
                               .daemon_flags = daemon_flags,
                               .termination_grace = milliseconds(3000)});
    REQUIRE_MESSAGE(opened.ok(), opened.status().ToString());
    runtime = *std::move(opened);
    ShareRecord record;
    record.set_name(kVolume);
    record.mutable_spec()->set_volume(kVolume);
    record.mutable_spec()->set_serve(true);
    REQUIRE(store.Create(record).ok());
    store.Watch([this](const std::string& name) {
      auto r = store.Get(name);
      if (!r.ok()) return;
      std::lock_guard lock(mu);
      if (phases.empty() || phases.back() != r->status().phase())
        phases.push_back(r->status().phase());
    });
    ControllerOptions options;
    options.workers = 2;
    options.reconciler.resync_ms = 200;
    options.reconciler.unhealthy_grace_ms = 1000;
    controller = std::make_unique<Controller>(store, *runtime, connector, clock, options);
    REQUIRE(controller->Start().ok());
  }
  ~Cluster() {
    if (controller) controller->Stop();
    runtime.reset();  // deletes every pod it started, then `temp` goes
  }

  pb::ShareStatusRecord Status() { return RequireOk(store.Get(kVolume)).status(); }
  bool WaitRunning(uint64_t min_epoch, milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      const auto st = Status();
      if (st.phase() == pb::RUNNING && st.epoch() >= min_epoch) return true;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return false;
  }
  // What a failing check needs to be understood: the record and every phase seen.
  std::string Describe() {
    std::string phases_seen;
    {
      std::lock_guard lock(mu);
      for (auto p : phases) phases_seen += pb::Phase_Name(p) + " ";
    }
    const auto record = store.Get(kVolume);
    return "record: " +
           (record.ok() ? record->ShortDebugString() : std::string(record.status().message())) +
           "\nphases: " + phases_seen;
  }
  bool SawPhase(pb::Phase phase) {
    std::lock_guard lock(mu);
    return std::find(phases.begin(), phases.end(), phase) != phases.end();
  }

  testing_support::TempDir temp{"sharemgr-e2e"};
  const std::string dir = temp.path();
  MemoryStore store;
  std::unique_ptr<LocalPodRuntime> runtime;
  GrpcShareConnector connector{{.deadline = milliseconds(500)}};
  SystemWallClock clock;
  std::unique_ptr<Controller> controller;
  std::mutex mu;
  std::vector<pb::Phase> phases;
};

// Writes a new file every 200 ms and remembers which writes succeeded, and
// when each was begun.
class Writer {
 public:
  explicit Writer(uint16_t port) : port_(port), thread_([this] { Run(); }) {}
  ~Writer() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::vector<std::string> written() {
    std::lock_guard lock(mu_);
    std::vector<std::string> names;
    for (const auto& w : written_) names.push_back(w.name);
    return names;
  }
  // Successful writes begun after `t`: once every process of the old pod is
  // gone by `t`, only the new pod can have served them.
  size_t WrittenBegunAfter(Clock::time_point t) {
    std::lock_guard lock(mu_);
    return static_cast<size_t>(std::count_if(written_.begin(), written_.end(),
                                             [&](const Written& w) { return w.begun > t; }));
  }

 private:
  struct Written {
    std::string name;
    Clock::time_point begun;
  };
  void Run() {
    for (int n = 0; !stop_; ++n) {
      const std::string name = "/file-" + std::to_string(n);
      const std::string data = "payload of " + name + std::string(5000, '.');
      const auto begun = Clock::now();
      if (testing_support::WriteOnce("127.0.0.1", port_, std::string("/") + kVolume, name, data,
                                     milliseconds(1000))
              .ok()) {
        std::lock_guard lock(mu_);
        written_.push_back({name, begun});
      }
      std::this_thread::sleep_for(milliseconds(200));
    }
  }
  uint16_t port_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Written> written_;
  std::thread thread_;
};

// A process of the old pod, named by pid and start time while it runs, so a
// reused pid is never taken for it.
struct OldProcess {
  static OldProcess Of(pid_t pid) {
    REQUIRE(pid > 0);
    return {pid, RequireOk(base::ReadProcStat(pid)).start_ticks};
  }
  bool gone() const { return !base::ProcessAlive(pid, start_ticks); }
  pid_t pid;
  uint64_t start_ticks;
};

// Waits until every one of `old` has exited (a zombie counts): the moment
// from which only the new pod can answer on the volume's NFS port.
Clock::time_point WaitAllGone(const std::vector<OldProcess>& old) {
  for (const auto& p : old) {
    CAPTURE(p.pid);
    REQUIRE(testing_support::WaitFor([&] { return p.gone(); }, milliseconds(20'000)));
  }
  return Clock::now();
}

using testing_support::HoldsFor;
using testing_support::WaitFor;

void CheckAllReadBack(uint16_t port, const std::vector<std::string>& files) {
  for (const auto& name : files) {
    CAPTURE(name);
    absl::StatusOr<std::string> data = absl::UnavailableError("not read");
    // The new ganesha may still be in grace for reads of files opened before.
    WaitFor(
        [&] {
          data = testing_support::ReadOnce("127.0.0.1", port, std::string("/") + kVolume, name,
                                           milliseconds(1000));
          return data.ok();
        },
        milliseconds(10'000));
    REQUIRE_MESSAGE(data.ok(), data.status().ToString());
    CHECK(*data == "payload of " + name + std::string(5000, '.'));
  }
}

}  // namespace

TEST_CASE(
    "5. ganesha killed until its share-manager gives up: share failed, pod replaced, writes "
    "resume, data intact") {
  Cluster cluster;
  REQUIRE(cluster.WaitRunning(1, milliseconds(20'000)));
  const auto first = cluster.Status();
  const uint16_t port = cluster.runtime->NfsPort(kVolume);
  Writer writer(port);
  REQUIRE(WaitFor([&] { return writer.written().size() >= 3; }, milliseconds(15'000)));

  std::vector<OldProcess> old = {OldProcess::Of(cluster.runtime->Pid(first.pod()))};
  // Kill ganesha twice: with --max-deaths 1 the share-manager gives up and exits 3.
  ShareClient client(first.endpoint());
  pid_t killed = 0;
  for (int i = 0; i < 2; ++i) {
    // SERVING again with the restarted ganesha (a status read right after the
    // kill may still name the one just killed).
    pid_t ganesha = 0;
    REQUIRE(WaitFor(
        [&] {
          auto s = client.GetStatus();
          if (s.ok() && s->state() == sharemanager::v1::SERVING) ganesha = s->ganesha_pid();
          return ganesha > 0 && ganesha != killed;
        },
        milliseconds(10'000)));
    old.push_back(OldProcess::Of(ganesha));
    REQUIRE(KillPid(ganesha, SIGKILL) == 0);
    killed = ganesha;
  }

  REQUIRE_MESSAGE(cluster.WaitRunning(first.epoch() + 1, milliseconds(30'000)), cluster.Describe());
  const auto old_gone = WaitAllGone(old);
  CHECK_MESSAGE(cluster.SawPhase(pb::ERROR), cluster.Describe());
  const auto replaced = cluster.Status();
  CHECK_MESSAGE(replaced.pod() == PodName(kVolume, first.epoch() + 1), cluster.Describe());
  auto pods = cluster.runtime->List(kVolume);
  REQUIRE(pods.ok());
  CHECK_MESSAGE(pods->size() == 1, cluster.Describe());  // the failed pod was deleted

  REQUIRE(WaitFor([&] { return writer.WrittenBegunAfter(old_gone) >= 3; }, milliseconds(20'000)));
  writer.Stop();
  CheckAllReadBack(port, writer.written());
}

TEST_CASE("5b. a frozen share-manager is replaced and writes resume") {
  Cluster cluster;
  REQUIRE(cluster.WaitRunning(1, milliseconds(20'000)));
  const auto first = cluster.Status();
  const uint16_t port = cluster.runtime->NfsPort(kVolume);
  Writer writer(port);
  REQUIRE(WaitFor([&] { return writer.written().size() >= 2; }, milliseconds(15'000)));
  // The frozen share-manager's ganesha keeps serving NFS until the pod is
  // deleted: only writes begun after both are gone count as resumed.
  const auto frozen = OldProcess::Of(cluster.runtime->Pid(first.pod()));
  const auto old_ganesha =
      OldProcess::Of(RequireOk(ShareClient(first.endpoint()).GetStatus()).ganesha_pid());
  REQUIRE(KillPid(frozen.pid, SIGSTOP) == 0);

  REQUIRE_MESSAGE(cluster.WaitRunning(first.epoch() + 1, milliseconds(30'000)), cluster.Describe());
  CHECK_MESSAGE(cluster.SawPhase(pb::ERROR), cluster.Describe());
  // The frozen pod was deleted (killed), not left beside the new one.
  const auto old_gone = WaitAllGone({frozen, old_ganesha});
  REQUIRE(WaitFor([&] { return writer.WrittenBegunAfter(old_gone) >= 2; }, milliseconds(20'000)));
  writer.Stop();
  CheckAllReadBack(port, writer.written());
}

TEST_CASE("6. a repair longer than the unhealthy grace: the pod is kept, same epoch serves after") {
  testing_support::SlowFsck fsck;  // before the cluster: its pods inherit PATH
  auto loop = testing_support::MakeLoop("ext4");
  Cluster cluster({"--device", loop->path(), "--fs", "ext4", "--volume-probe-interval", "200ms"});
  REQUIRE_MESSAGE(cluster.WaitRunning(1, milliseconds(30'000)), cluster.Describe());
  const auto first = cluster.Status();
  const uint16_t port = cluster.runtime->NfsPort(kVolume);
  REQUIRE(testing_support::WriteOnce("127.0.0.1", port, std::string("/") + kVolume, "/precious",
                                     "kept", milliseconds(5000))
              .ok());
  const int checks = fsck.Count("start");
  fsck.Slow(true);
  std::ofstream("/sys/fs/ext4/" + std::filesystem::path(loop->path()).filename().string() +
                "/trigger_fs_error")
      << "test error\n";
  REQUIRE(fsck.WaitCount("start", checks + 1, milliseconds(10'000)));
  // The controller records the repair and waits.
  REQUIRE_MESSAGE(
      WaitFor([&] { return cluster.Status().phase() == pb::REPAIRING; }, milliseconds(5000)),
      cluster.Describe());
  // A negative wait, the assertion itself: for five times the 1 s unhealthy
  // grace, checked all along, the repairing pod is neither replaced nor given
  // a new epoch.
  CHECK_MESSAGE(HoldsFor(
                    [&] {
                      const auto now = cluster.Status();
                      return now.phase() == pb::REPAIRING && now.epoch() == first.epoch();
                    },
                    milliseconds(5000)),
                cluster.Describe());
  fsck.Slow(false);
  REQUIRE_MESSAGE(cluster.WaitRunning(first.epoch(), milliseconds(30'000)), cluster.Describe());
  const auto after = cluster.Status();
  CHECK(after.epoch() == first.epoch());
  CHECK(after.pod() == first.pod());
  CHECK_FALSE(cluster.SawPhase(pb::ERROR));
  CHECK(fsck.Count("TERM") == 0);  // nobody stopped the check
  absl::StatusOr<std::string> data = absl::UnavailableError("not read");
  WaitFor(
      [&] {
        data = testing_support::ReadOnce("127.0.0.1", port, std::string("/") + kVolume, "/precious",
                                         milliseconds(1000));
        return data.ok();
      },
      milliseconds(10'000));
  REQUIRE_MESSAGE(data.ok(), data.status().ToString());
  CHECK(*data == "kept");
}

TEST_CASE("a controller restart over the same work dir adopts the running pod, same epoch") {
  testing_support::TempDir dir("sharemgr-e2e-adopt");
  const std::vector<std::string> flags = {"--grace-period", "2",    "--lease-lifetime", "2",
                                          "--stop-timeout", "2s",   "--probe-interval", "200ms",
                                          "--log-level",    "debug"};
  auto options = [&](bool stop_pods_on_exit) {
    return LocalPodRuntimeOptions{.share_manager_binary = testing_support::ShareManagerBinary(),
                                  .work_dir = dir.path(),
                                  .daemon_flags = flags,
                                  .stop_pods_on_exit = stop_pods_on_exit};
  };
  MemoryStore store;
  ShareRecord record;
  record.set_name(kVolume);
  record.mutable_spec()->set_volume(kVolume);
  record.mutable_spec()->set_serve(true);
  REQUIRE(store.Create(record).ok());
  GrpcShareConnector connector{{.deadline = milliseconds(500)}};
  SystemWallClock clock;
  ControllerOptions controller_options;
  controller_options.workers = 2;
  controller_options.reconciler.resync_ms = 200;
  controller_options.reconciler.unhealthy_grace_ms = 1000;
  auto running = [&] {
    auto st = store.Get(kVolume);
    return st.ok() && st->status().phase() == pb::RUNNING;
  };
  // Whatever happens, nothing of the pod outlives the test (killed by pid).
  pid_t pid = -1;
  struct Cleanup {
    const pid_t& pid;
    std::string state_dir;
    ~Cleanup() {
      if (pid <= 0) return;
      kill(-pid, SIGKILL);
      if (auto g = base::ReadFile(state_dir + "/ganesha.pid");
          g.ok() && std::atoi(g->c_str()) > 0) {
        kill(-std::atoi(g->c_str()), SIGKILL);
      }
      waitpid(pid, nullptr, 0);  // still this process's child, though adopted
    }
  } cleanup{pid, dir.path() + "/" + kVolume + "/state"};

  std::string pod;
  uint16_t port = 0;
  {
    auto opened = LocalPodRuntime::Open(options(/*stop_pods_on_exit=*/false));
    REQUIRE_MESSAGE(opened.ok(), opened.status().ToString());
    LocalPodRuntime& runtime = **opened;
    Controller first(store, runtime, connector, clock, controller_options);
    REQUIRE(first.Start().ok());
    REQUIRE_MESSAGE(WaitFor(running, milliseconds(30'000)),
                    RequireOk(store.Get(kVolume)).ShortDebugString());
    pod = RequireOk(store.Get(kVolume)).status().pod();
    pid = runtime.Pid(pod);
    port = runtime.NfsPort(kVolume);
    first.Stop();
    runtime.Shutdown();  // the pod keeps running
  }
  REQUIRE(pid > 0);
  REQUIRE(kill(pid, 0) == 0);
  const auto before = RequireOk(store.Get(kVolume)).status();

  // The first runtime is gone (destroyed above): the work dir is free again.
  auto opened = LocalPodRuntime::Open(options(/*stop_pods_on_exit=*/true));
  REQUIRE_MESSAGE(opened.ok(), opened.status().ToString());
  LocalPodRuntime& runtime = **opened;
  CHECK(runtime.Pid(pod) == pid);
  CHECK(runtime.NfsPort(kVolume) == port);
  Controller second(store, runtime, connector, clock, controller_options);
  REQUIRE(second.Start().ok());
  // A negative wait, the assertion itself: for many resyncs (200 ms) and
  // three unhealthy graces (1 s), checked all along, the adopted pod stays.
  CHECK(HoldsFor(
      [&] {
        const auto now = store.Get(kVolume);
        return now.ok() && now->status().phase() == pb::RUNNING &&
               now->status().epoch() == before.epoch() && now->status().pod() == pod;
      },
      milliseconds(3000)));
  const auto after = RequireOk(store.Get(kVolume)).status();
  CHECK_MESSAGE(after.phase() == pb::RUNNING, after.ShortDebugString());
  CHECK(after.epoch() == before.epoch());
  CHECK(after.pod() == pod);
  CHECK(after.replacements() == before.replacements());
  CHECK(runtime.Pid(pod) == pid);
  CHECK(testing_support::WriteOnce("127.0.0.1", port, std::string("/") + kVolume, "/after-restart",
                                   "data", milliseconds(3000))
            .ok());
  second.Stop();
  runtime.Shutdown();  // deletes the adopted pod and waits for its processes
  CHECK(waitpid(pid, nullptr, WNOHANG) == pid);
  pid = -1;
}

TEST_CASE("a stale epoch is refused by a real share-manager") {
  Cluster cluster;
  REQUIRE(cluster.WaitRunning(1, milliseconds(20'000)));
  ShareClient client(cluster.Status().endpoint());
  const auto refused = client.Mount(cluster.Status().epoch() + 5, 0);
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(client.Mount(cluster.Status().epoch(), 0).ok());
}

}  // namespace controller

namespace controller {

TEST_CASE("StatusWatch reports each status, then 'unreachable' when the share-manager is gone") {
  auto d = testing_support::DaemonProcess::Start();
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  std::mutex mu;
  std::condition_variable cv;
  std::vector<StatusWatch::Event> events;
  StatusWatch watch((*d)->addr(), [&](const StatusWatch::Event& e) {
    std::lock_guard lock(mu);
    events.push_back(e);
    cv.notify_all();
  });
  auto saw = [&](const std::function<bool(const StatusWatch::Event&)>& match) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10),
                       [&] { return std::any_of(events.begin(), events.end(), match); });
  };
  CHECK(saw(
      [](const auto& e) { return e.status && e.status->state() == sharemanager::v1::SERVING; }));
  (*d)->Signal(SIGTERM);  // the stream ends with the server
  CHECK(saw([](const auto& e) { return !e.status.has_value() && !e.error.empty(); }));
}

TEST_CASE(
    "StatusWatch reports a frozen share-manager unreachable through keepalive (10 s ping, 2 s "
    "timeout), though its connection stays open") {
  auto d = testing_support::DaemonProcess::Start();
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  std::mutex mu;
  std::condition_variable cv;
  bool serving = false;
  std::optional<std::chrono::steady_clock::time_point> unreachable_at;
  StatusWatch watch((*d)->addr(), [&](const StatusWatch::Event& e) {
    std::lock_guard lock(mu);
    if (e.status && e.status->state() == sharemanager::v1::SERVING) serving = true;
    if (!e.status && !unreachable_at) unreachable_at = std::chrono::steady_clock::now();
    cv.notify_all();
  });
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return serving; }));
  }
  // Frozen, not gone: the kernel keeps the TCP connection up, no error
  // arrives on the stream; only an unanswered keepalive ping tells.
  const auto frozen_at = std::chrono::steady_clock::now();
  (*d)->Signal(SIGSTOP);
  std::unique_lock lock(mu);
  const bool noticed =
      cv.wait_for(lock, std::chrono::seconds(20), [&] { return unreachable_at.has_value(); });
  lock.unlock();
  (*d)->Signal(SIGCONT);
  REQUIRE(noticed);
  // Not a plain reconnect's failure: it took the ping's wait.
  CHECK(*unreachable_at - frozen_at >= std::chrono::seconds(2));
}

}  // namespace controller

namespace controller {
namespace {

using testing_support::TempDir;

std::string ShareControllerBinary() {
  return std::filesystem::path(testing_support::ShareManagerBinary()).parent_path().parent_path() /
         "controller" / "share-controller";
}

// A share-controller process for one test: its output collected; stopped
// (SIGTERM, then SIGKILL) and reaped when the test ends, pass or fail.
class ControllerProcess : public testing_support::ProgramProcess {
 public:
  explicit ControllerProcess(const std::vector<std::string>& args)
      : ProgramProcess(WithBinary(args)) {}

 private:
  static std::vector<std::string> WithBinary(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {ShareControllerBinary()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
};

}  // namespace

TEST_CASE("share-controller runs a share with real processes and prints its phases") {
  TempDir dir("sharemgr-ctl");
  ControllerProcess ctl({"--work-dir", dir.path(), "--share", "vol-cli", "--store-file",
                         dir.path() + "/store.jsonl", "--daemon-flag=--grace-period=2",
                         "--daemon-flag=--lease-lifetime=2", "--resync", "200ms"});
  CHECK_MESSAGE(ctl.WaitOutput("vol-cli RUNNING epoch=1", milliseconds(20'000)), ctl.output());
  CHECK(ctl.output().find("vol-cli PENDING") != std::string::npos);
  const auto exit = ctl.Stop();
  REQUIRE_MESSAGE(exit.has_value(), ctl.output());
  CHECK(exit->ShellCode() == 0);
  // The record survived in the store file for a restart.
  std::ifstream store(dir.path() + "/store.jsonl");
  std::string line;
  std::getline(store, line);
  CHECK(line.find("\"name\":\"vol-cli\"") != std::string::npos);
}

TEST_CASE(
    "share-controller --log-format json: every line parses as a JSON object, a phase line with "
    "the share's volume, epoch, phase and pod as fields") {
  TempDir dir("sharemgr-ctl");
  ControllerProcess ctl({"--log-format", "json", "--work-dir", dir.path(), "--share", "vol-json",
                         "--daemon-flag=--grace-period=2", "--daemon-flag=--lease-lifetime=2",
                         "--resync", "200ms"});
  CHECK_MESSAGE(ctl.WaitOutput("vol-json RUNNING epoch=1", milliseconds(20'000)), ctl.output());
  const auto exit = ctl.Stop();
  REQUIRE_MESSAGE(exit.has_value(), ctl.output());
  CHECK(exit->ShellCode() == 0);
  const auto lines = testing_support::ParseJsonLines(ctl.output());
  REQUIRE_MESSAGE(lines.ok(), lines.status().ToString());
  const auto running = std::find_if(lines->begin(), lines->end(), [](const std::string& line) {
    return line.find("\"phase\": \"RUNNING\"") != std::string::npos;
  });
  REQUIRE(running != lines->end());
  for (const char* field : {"\"component\": \"share-controller\"", "\"volume\": \"vol-json\"",
                            "\"epoch\": 1,", "\"pod\": \"", "\"level\": \"info\""}) {
    CAPTURE(field);
    CHECK(running->find(field) != std::string::npos);
  }
}

namespace {

// Starts a share-controller with `first_args`, then one with `second_args`:
// the second must exit 1 at once with one line naming `held` and the first's
// pid, and the first must keep running (and stop cleanly).
void CheckSecondControllerRefused(const std::vector<std::string>& first_args,
                                  const std::vector<std::string>& second_args,
                                  const std::string& held) {
  ControllerProcess first(first_args);
  REQUIRE_MESSAGE(first.WaitOutput("controlling 0 share(s)", milliseconds(10'000)), first.output());
  ControllerProcess second(second_args);
  const auto exit = second.WaitExit(milliseconds(10'000));
  REQUIRE_MESSAGE(exit.has_value(), second.output());
  CHECK(exit->ShellCode() == 1);
  CHECK(second.output() == "share-controller: another share-controller holds " + held + " (pid " +
                               std::to_string(first.pid()) + ")\n");
  CHECK_MESSAGE(!first.WaitExit(milliseconds(0)), first.output());
  const auto stopped = first.Stop();
  REQUIRE_MESSAGE(stopped.has_value(), first.output());
  CHECK(stopped->ShellCode() == 0);
}

}  // namespace

// Two share-controllers on one store file would overwrite each other's records
// (epochs included); on one work dir they would run two pods per volume.
TEST_CASE(
    "a second share-controller on the same store file exits 1 while the first keeps running") {
  TempDir dir("sharemgr-ctl");
  const std::string store = dir.path() + "/store.jsonl";
  CheckSecondControllerRefused({"--work-dir", dir.path() + "/w1", "--store-file", store},
                               {"--work-dir", dir.path() + "/w2", "--store-file", store},
                               store + ".lock");
}

TEST_CASE("a second share-controller on the same work dir exits 1 while the first keeps running") {
  TempDir dir("sharemgr-ctl");
  const std::string work_dir = dir.path() + "/work";
  CheckSecondControllerRefused({"--work-dir", work_dir, "--store-file", dir.path() + "/one.jsonl"},
                               {"--work-dir", work_dir, "--store-file", dir.path() + "/two.jsonl"},
                               work_dir);
}

TEST_CASE("share-controller refuses an unreadable store file instead of starting empty") {
  TempDir dir("sharemgr-ctl");
  const std::string store = dir.path() + "/store.jsonl";
  REQUIRE(std::filesystem::create_directory(store));  // a directory in its place
  ControllerProcess ctl(
      {"--work-dir", dir.path() + "/work", "--store-file", store, "--share", "vol-cli"});
  const auto exit = ctl.WaitExit(milliseconds(10'000));
  REQUIRE_MESSAGE(exit.has_value(), ctl.output());
  CHECK(exit->ShellCode() == 2);
  CHECK(ctl.output() ==
        "share-controller: cannot load the store file: " + store + " is not a regular file\n");
  CHECK(!std::filesystem::exists(dir.path() + "/work/vol-cli"));  // no pod was started
}

TEST_CASE("share-controller refuses a bad --port-range before it starts anything") {
  TempDir dir("sharemgr-ctl");
  for (const std::string range : {"29999-20000", "40000-50000x"}) {
    ControllerProcess ctl(
        {"--work-dir", dir.path() + "/work", "--share", "vol-cli", "--port-range", range});
    const auto exit = ctl.WaitExit(milliseconds(10'000));
    REQUIRE_MESSAGE(exit.has_value(), ctl.output());
    CHECK(exit->ShellCode() == 2);
    CHECK(ctl.output() == "share-controller: --port-range: invalid port range '" + range +
                              "' (expected FIRST-LAST, 1 <= FIRST <= LAST <= 65535)\n");
  }
  CHECK(!std::filesystem::exists(dir.path() + "/work"));  // nothing was started
}

TEST_CASE("share-controller --store etcd://... keeps the share records in etcd") {
  TempDir dir("sharemgr-ctl");
  testing_support::EtcdCluster etcd;
  const std::string url = "etcd://" + absl::StrJoin(etcd.endpoints(), ",") + "/ctl";
  {
    // A replica of one (it leads at once); stopped, it deletes its pod as asked
    // (an HA replica leaves its pods to the next leader by default).
    ControllerProcess ctl({"--work-dir", dir.path(), "--share", "vol-cli", "--store", url,
                           "--daemon-flag=--grace-period=2", "--daemon-flag=--lease-lifetime=2",
                           "--resync", "200ms", "--stop-pods-on-exit=true"});
    // Printed from the store's watch: the phases went through etcd.
    CHECK_MESSAGE(ctl.WaitOutput("vol-cli RUNNING epoch=1", milliseconds(20'000)), ctl.output());
    const auto exit = ctl.Stop();
    REQUIRE_MESSAGE(exit.has_value(), ctl.output());
    CHECK(exit->ShellCode() == 0);
  }
  auto client = RequireOk(etcd::EtcdClient::Create({.endpoints = etcd.endpoints()}));
  auto store = RequireOk(EtcdStore::Open(std::move(client), "/ctl"));
  const auto record = RequireOk(store->Get("vol-cli"));
  CHECK(record.status().epoch() == 1);
  CHECK(record.spec().serve());
}

TEST_CASE("share-controller refuses a bad --store, and exits 1 when etcd cannot be reached") {
  TempDir dir("sharemgr-ctl");
  const std::string work = dir.path() + "/work";
  const auto run = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"--work-dir", work, "--share", "vol-cli"};
    argv.insert(argv.end(), args.begin(), args.end());
    ControllerProcess ctl(argv);
    const auto exit = ctl.WaitExit(milliseconds(20'000));
    REQUIRE_MESSAGE(exit.has_value(), ctl.output());
    return std::make_pair(exit->ShellCode(), ctl.output());
  };
  auto [code, output] = run({"--store", "http://127.0.0.1:1/p"});
  CHECK(code == 2);
  CHECK(output ==
        "share-controller: --store: 'http://127.0.0.1:1/p' is not "
        "etcd://HOST:PORT[,HOST:PORT...][/PREFIX]: no etcd:// scheme\n");
  std::tie(code, output) = run({"--store", "etcd://127.0.0.1:1/p", "--store-file", "x.jsonl"});
  CHECK(code == 2);
  std::tie(code, output) = run({"--etcd-cert", "c.pem"});
  CHECK(code == 2);
  std::tie(code, output) = run({"--store", "etcd://127.0.0.1:1/p", "--etcd-cert", "c.pem"});
  CHECK(code == 2);
  CHECK_MESSAGE(output.find("--etcd-key") != std::string::npos, output);
  const std::string nobody = "127.0.0.1:" + std::to_string(base::FreeLoopbackPort());
  std::tie(code, output) = run({"--store", "etcd://" + nobody + "/p", "--etcd-timeout", "1s"});
  CHECK(code == 1);
  CHECK_MESSAGE(output.find(nobody) != std::string::npos, output);
  CHECK(!std::filesystem::exists(work + "/vol-cli"));  // no pod was started
}

}  // namespace controller

namespace controller {
namespace {

// Pids of the share-manager processes serving `volume` (from /proc).
std::vector<pid_t> ShareManagersOf(const std::string& volume) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    const auto stat = base::ReadProcStat(pid);
    if (!stat || stat->comm != "share-manager") continue;
    const auto cmdline = base::ReadFile(entry.path().string() + "/cmdline");
    if (!cmdline.ok()) continue;
    if (base::CmdlineCarries(*cmdline, "--volume", volume) == base::CmdlineMatch::kYes) {
      found.push_back(pid);
    }
  }
  return found;
}

}  // namespace

TEST_CASE(
    "share-controller --metrics-listen: shares by phase, passes, one replacement per "
    "replaced pod") {
  TempDir dir("sharemgr-ctl");
  const uint16_t port = base::FreeLoopbackPort();
  ControllerProcess ctl({"--work-dir", dir.path(), "--share", "vol-metrics",
                         "--daemon-flag=--grace-period=2", "--daemon-flag=--lease-lifetime=2",
                         "--resync", "200ms", "--metrics-listen",
                         "127.0.0.1:" + std::to_string(port)});
  // The line is printed as the record is written; the metrics hear of it
  // when the write returns.
  const auto MetricsSayRunning = [&] {
    return testing_support::WaitFor(
        [&] {
          const auto now = testing_support::MetricsScrape::From(port);
          return now.ok() && now->Count("sharemgr_controller_shares{phase=\"RUNNING\"}") == 1;
        },
        milliseconds(5000));
  };
  REQUIRE_MESSAGE(ctl.WaitOutput("vol-metrics RUNNING epoch=1", milliseconds(20'000)),
                  ctl.output());
  REQUIRE(MetricsSayRunning());
  const auto running = RequireOk(testing_support::MetricsScrape::From(port));
  CHECK(running.Series("sharemgr_controller_shares") ==
        std::map<std::string, double>{{"{phase=\"ERROR\"}", 0},
                                      {"{phase=\"PENDING\"}", 0},
                                      {"{phase=\"REPAIRING\"}", 0},
                                      {"{phase=\"RUNNING\"}", 1},
                                      {"{phase=\"STARTING\"}", 0},
                                      {"{phase=\"STOPPED\"}", 0},
                                      {"{phase=\"STOPPING\"}", 0}});
  const double passes =
      running.Count("sharemgr_controller_reconcile_passes_total{result=\"ok\"}") +
      running.Count("sharemgr_controller_reconcile_passes_total{result=\"error\"}");
  CHECK(passes >= 2);
  CHECK(running.Count("sharemgr_controller_reconcile_duration_seconds_count") >= passes - 1);
  CHECK(running.Value("sharemgr_controller_replacements_total") == 0);
  CHECK(running.Value("sharemgr_controller_queue_depth").has_value());
  CHECK(RequireOk(testing_support::HttpGet("127.0.0.1", port, "/")).status == 404);

  const auto pids = ShareManagersOf("vol-metrics");
  REQUIRE(pids.size() == 1);
  REQUIRE(KillPid(pids[0], SIGKILL) == 0);
  REQUIRE_MESSAGE(ctl.WaitOutput("vol-metrics RUNNING epoch=2", milliseconds(20'000)),
                  ctl.output());
  CHECK(MetricsSayRunning());
  const auto replaced = RequireOk(testing_support::MetricsScrape::From(port));
  CHECK(replaced.Value("sharemgr_controller_replacements_total") == 1);
  const auto exit = ctl.Stop();
  REQUIRE_MESSAGE(exit.has_value(), ctl.output());
  CHECK(exit->ShellCode() == 0);
}

}  // namespace controller
