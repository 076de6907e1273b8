// LocalPodRuntime without a real share-manager: a shell script stands in for
// it (and starts a "ganesha" in its own process group), so what the runtime
// assumes about process trees, pid reuse, adoption and ports is checked fast.
// Every test kills what it started by pid, pass or fail.
#include "controller/local_pod_runtime.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "base/files.h"
#include "base/proc.h"
#include "controller/grpc_share_connector.h"
#include "tests/controller/fake_share_manager.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_for.h"

namespace controller {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

using testing_support::RequireOk;
using testing_support::WaitFor;

// Kills the pids it was given (their groups too) when the test ends.
struct Reaper {
  std::vector<std::pair<pid_t, uint64_t>> pids;
  void Add(pid_t pid) {
    auto st = base::ReadProcStat(pid);
    if (st) pids.emplace_back(pid, st->start_ticks);
  }
  ~Reaper() {
    for (auto [pid, start] : pids) {
      auto st = base::ReadProcStat(pid);
      if (!st || st->start_ticks != start) continue;
      if (base::ProcessAlive(pid, start)) {
        if (getpgid(pid) == pid) kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
      }
      // Ours (a pod adopted by a second runtime in this process is still our
      // child): reap it rather than leave a zombie.
      if (st->ppid == getpid()) waitpid(pid, nullptr, 0);
    }
  }
};

// A share-manager stand-in: starts a "ganesha" that ignores SIGTERM in its own
// process group (its pid in <state-dir>/ganesha.pid), exits on SIGTERM itself.
std::string FakeShareManager(const std::string& dir) {
  const std::string path = dir + "/fake-share-manager";
  std::ofstream(path) << R"(#!/bin/sh
state=""
while [ $# -gt 0 ]; do [ "$1" = --state-dir ] && state=$2; shift; done
mkdir -p "$state"
setsid sh -c 'trap "" TERM; echo $$ > "$0/ganesha.tmp"; mv "$0/ganesha.tmp" "$0/ganesha.pid"; exec sleep 60' "$state" &
trap 'exit 0' TERM
while :; do sleep 0.1; done
)";
  chmod(path.c_str(), 0755);
  return path;
}

sharemanager::controller::v1::ShareSpec Spec(const std::string& volume) {
  sharemanager::controller::v1::ShareSpec spec;
  spec.set_volume(volume);
  spec.set_serve(true);
  return spec;
}

pid_t WaitGanesha(const std::string& state_dir) {
  pid_t pid = 0;
  WaitFor(
      [&] {
        auto text = base::ReadFile(state_dir + "/ganesha.pid");
        return text.ok() && (pid = std::atoi(text->c_str())) > 0;
      },
      milliseconds(5000));
  return pid;
}

}  // namespace

TEST_CASE("local runtime: ports are unique across volumes and roles, and stable across restarts") {
  testing_support::TempDir dir;
  std::map<std::string, LocalPortTable::Ports> first;
  std::set<uint16_t> all;
  {
    LocalPortTable table(dir.path());
    for (int i = 0; i < 40; ++i) {
      auto ports = table.Get("vol-" + std::to_string(i));
      REQUIRE(ports.ok());
      first["vol-" + std::to_string(i)] = *ports;
      all.insert(ports->grpc);
      all.insert(ports->nfs);
    }
  }
  CHECK(all.size() == 80);           // no port twice, whether gRPC or NFS
  LocalPortTable again(dir.path());  // as after a controller restart
  for (const auto& [volume, ports] : first) {
    auto got = again.Get(volume);
    REQUIRE(got.ok());
    CHECK(got->grpc == ports.grpc);
    CHECK(got->nfs == ports.nfs);
  }
  for (int i = 40; i < 60; ++i) {
    auto ports = again.Get("vol-" + std::to_string(i));
    REQUIRE(ports.ok());
    CHECK(all.insert(ports->grpc).second);
    CHECK(all.insert(ports->nfs).second);
  }
}

TEST_CASE("local runtime: a pod record whose pid was reused is not adopted, and is reported gone") {
  testing_support::TempDir dir;
  Reaper reaper;
  // Someone else's process now holds the recorded pid.
  const pid_t other = fork();
  REQUIRE(other >= 0);
  if (other == 0) {
    execlp("sleep", "sleep", "30", nullptr);
    _exit(127);
  }
  reaper.Add(other);
  auto st = base::ReadProcStat(other);
  REQUIRE(st.has_value());
  REQUIRE(base::EnsureDirectory(dir.path() + "/vol/pods", 0755).ok());
  const std::string name = PodName("vol", 4);
  REQUIRE(base::WriteFileAtomically(dir.path() + "/vol/pods/" + name + ".pod",
                                    "name=" + name +
                                        "\nvolume=vol\nepoch=4\npid=" + std::to_string(other) +
                                        "\nstart_ticks=" + std::to_string(st->start_ticks - 1) +
                                        "\nstarted_unix_ms=1\nendpoint=127.0.0.1:1\nnfs_port=2\n")
              .ok());
  LocalPodRuntime runtime({.work_dir = dir.path(), .termination_grace = milliseconds(200)});
  auto pods = runtime.List("vol");
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);  // listed: a record is never read as "no pod"
  CHECK((*pods)[0].name == name);
  CHECK((*pods)[0].phase == PodPhase::kFailed);  // gone, not Running
  CHECK(runtime.Delete(name).ok());
  pods = runtime.List("vol");
  REQUIRE(pods.ok());
  CHECK(pods->empty());
  // A negative wait, the assertion itself: three monitor passes (100 ms) and
  // the pid's present owner was never signalled.
  std::this_thread::sleep_for(milliseconds(300));
  CHECK(base::ProcessAlive(other, st->start_ticks));
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/vol/pods/" + name + ".pod"));
  runtime.Shutdown();
}

TEST_CASE("local runtime: an unreadable pod record fails List instead of reading as no pod") {
  testing_support::TempDir dir;
  REQUIRE(base::EnsureDirectory(dir.path() + "/vol/pods", 0755).ok());
  REQUIRE(base::WriteFileAtomically(dir.path() + "/vol/pods/x.pod", "garbage\n").ok());
  LocalPodRuntime runtime({.work_dir = dir.path()});
  CHECK_FALSE(runtime.List("vol").ok());
  CHECK(runtime.List("other").ok());
}

TEST_CASE("local runtime: Delete reports a pod gone only after its ganesha is gone") {
  testing_support::TempDir dir;
  Reaper reaper;
  LocalPodRuntime runtime({.share_manager_binary = FakeShareManager(dir.path()),
                           .work_dir = dir.path(),
                           .termination_grace = milliseconds(1500)});
  auto pod = runtime.Create(Spec("vol"), 1);
  REQUIRE(pod.ok());
  reaper.Add(runtime.Pid(pod->name));
  const pid_t ganesha = WaitGanesha(dir.path() + "/vol/state");
  REQUIRE(ganesha > 0);
  reaper.Add(ganesha);
  const auto ganesha_start = RequireOk(base::ReadProcStat(ganesha)).start_ticks;
  // List refreshes the pod from /proc: its ganesha, a child of the running
  // share-manager now, is one of the pod's processes from here on.
  REQUIRE(runtime.List("vol").ok());

  const auto asked = Clock::now();
  REQUIRE(runtime.Delete(pod->name).ok());
  CHECK(Clock::now() - asked < milliseconds(500));  // Delete does not wait
  // The share-manager exits at once (the pod turns Failed); its ganesha
  // ignores SIGTERM: still listed, terminating.
  std::vector<Pod> pods;
  REQUIRE(WaitFor(
      [&] {
        pods = RequireOk(runtime.List("vol"));
        return pods.size() == 1 && pods[0].phase == PodPhase::kFailed;
      },
      milliseconds(1000)));
  CHECK(pods[0].terminating);
  CHECK(base::ProcessAlive(ganesha, ganesha_start));
  CHECK(runtime.Delete(pod->name).code() == absl::StatusCode::kUnavailable);
  // After the grace, SIGKILL: then, and only then, gone.
  CHECK(WaitFor(
      [&] {
        auto now = runtime.List("vol");
        return now.ok() && now->empty();
      },
      milliseconds(5000)));
  CHECK_FALSE(base::ProcessAlive(ganesha, ganesha_start));
  CHECK(Clock::now() - asked >= milliseconds(1500));
  runtime.Shutdown();
}

TEST_CASE("local runtime: a new runtime over the same work dir adopts a running pod") {
  testing_support::TempDir dir;
  Reaper reaper;
  const std::string binary = FakeShareManager(dir.path());
  Pod created;
  pid_t pid = 0;
  {
    LocalPodRuntime first({.share_manager_binary = binary,
                           .work_dir = dir.path(),
                           .termination_grace = milliseconds(500),
                           .stop_pods_on_exit = false});
    auto pod = first.Create(Spec("vol"), 3);
    REQUIRE(pod.ok());
    created = *pod;
    pid = first.Pid(pod->name);
    REQUIRE(pid > 0);
    reaper.Add(pid);
    const pid_t ganesha = WaitGanesha(dir.path() + "/vol/state");
    REQUIRE(ganesha > 0);
    reaper.Add(ganesha);
    first.Shutdown();  // the pod keeps running
  }
  REQUIRE(kill(pid, 0) == 0);
  LocalPodRuntime second({.share_manager_binary = binary,
                          .work_dir = dir.path(),
                          .termination_grace = milliseconds(500)});
  auto pods = second.List("vol");
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  CHECK((*pods)[0].name == created.name);
  CHECK((*pods)[0].epoch == 3);
  CHECK((*pods)[0].phase == PodPhase::kRunning);
  CHECK((*pods)[0].endpoint == created.endpoint);
  CHECK((*pods)[0].nfs_port == created.nfs_port);
  CHECK((*pods)[0].started_unix_ms == created.started_unix_ms);
  CHECK(second.Pid(created.name) == pid);
  CHECK(second.NfsPort("vol") == created.nfs_port);

  // Not our child any more: its exit is still seen (pidfd), and only once its
  // ganesha is gone too.
  std::atomic<int> heard{0};
  second.Watch([&](const std::string&) { ++heard; });
  REQUIRE(second.Delete(created.name).ok());
  CHECK(WaitFor(
      [&] {
        auto now = second.List("vol");
        return now.ok() && now->empty();
      },
      milliseconds(5000)));
  CHECK(heard > 0);
  second.Shutdown();
}

TEST_CASE("connector: an answer from another volume, epoch or instance is not health") {
  const Pod pod{.name = PodName("vol-a", 3),
                .volume = "vol-a",
                .epoch = 3,
                .phase = PodPhase::kRunning,
                .started_unix_ms = 1'700'000'000'000};
  sharemanager::v1::ShareStatus status;
  status.set_state(sharemanager::v1::SERVING);
  status.set_volume("vol-a");
  status.set_epoch(3);
  status.set_started_unix_ms(pod.started_unix_ms + 150);
  auto seen = ObserveWith(status, pod);
  CHECK(seen.reachable);  // ours
  CHECK(seen.volume == "vol-a");

  auto other = status;
  other.set_volume("vol-b");
  other.set_epoch(7);
  seen = ObserveWith(other, pod);
  CHECK_FALSE(seen.reachable);
  CHECK(seen.error.find("answered by volume 'vol-b' epoch 7") != std::string::npos);

  auto later = status;  // same volume and epoch, another instance
  later.set_started_unix_ms(pod.started_unix_ms + 3'600'000);
  seen = ObserveWith(later, pod);
  CHECK_FALSE(seen.reachable);
  CHECK(seen.error.find("unreachable") != std::string::npos);

  auto unnamed = status;  // every share-manager states its volume
  unnamed.clear_volume();
  seen = ObserveWith(unnamed, pod);
  CHECK_FALSE(seen.reachable);
  CHECK(seen.error.find("answered by volume ''") != std::string::npos);
}

TEST_CASE("connector: a pod with a uid is answered for only by the share-manager given that uid") {
  const Pod pod{.name = PodName("vol-a", 3),
                .volume = "vol-a",
                .epoch = 3,
                .phase = PodPhase::kRunning,
                .started_unix_ms = 1'700'000'000'000,
                .uid = "uid-1"};
  sharemanager::v1::ShareStatus status;
  status.set_state(sharemanager::v1::SERVING);
  status.set_volume("vol-a");
  status.set_epoch(3);
  // The start stamp does not count when there is a uid: a clock step between
  // the two stamps cannot make the pod's own answer foreign.
  status.set_started_unix_ms(pod.started_unix_ms + 3'600'000);
  status.set_pod_uid("uid-1");
  CHECK(ObserveWith(status, pod).reachable);

  for (const char* uid : {"uid-2", ""}) {
    CAPTURE(uid);
    auto other = status;  // same volume and epoch, started at the same moment
    other.set_pod_uid(uid);
    other.set_started_unix_ms(pod.started_unix_ms + 100);
    const auto seen = ObserveWith(other, pod);
    CHECK_FALSE(seen.reachable);
    CHECK(seen.error.find("uid uid-1") != std::string::npos);
  }
}

}  // namespace controller
