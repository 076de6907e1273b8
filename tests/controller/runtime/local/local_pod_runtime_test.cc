// LocalPodRuntime without a real share-manager: a shell script stands in for
// it (and starts a "ganesha" in its own process group), so what the runtime
// assumes about process trees, pid reuse, adoption and ports is checked fast.
// Every test kills what it started by pid, pass or fail.
#include "controller/runtime/local/local_pod_runtime.h"

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "base/files.h"
#include "base/loopback_port.h"
#include "base/proc.h"
#include "controller/runtime/grpc_share_connector.h"
#include "tests/controller/fake_share_manager.h"
#include "tests/support/log_capture.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_for.h"

namespace controller {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

using testing_support::LogCapture;
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

// Writes an executable script to `path`; returns the path.
std::string WriteScript(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  chmod(path.c_str(), 0755);
  return path;
}

// A share-manager stand-in: starts a "ganesha" that ignores SIGTERM in its own
// process group (its pid in <state-dir>/ganesha.pid), exits on SIGTERM itself.
std::string FakeShareManager(const std::string& dir) {
  return WriteScript(dir + "/fake-share-manager", R"(#!/bin/sh
state=""
while [ $# -gt 0 ]; do [ "$1" = --state-dir ] && state=$2; shift; done
mkdir -p "$state"
setsid sh -c 'trap "" TERM; echo $$ > "$0/ganesha.tmp"; mv "$0/ganesha.tmp" "$0/ganesha.pid"; exec sleep 60' "$state" &
trap 'exit 0' TERM
while :; do sleep 0.1; done
)");
}

// A share-manager stand-in that ignores SIGTERM and runs a filesystem check
// in its own process group: <dir>/e2fsck (so /proc names it "e2fsck"), which
// ignores SIGTERM too, runs while <dir>/checking exists and writes its pid to
// <dir>/e2fsck.pid.
std::string FakeShareManagerWithFsck(const std::string& dir) {
  const std::string fsck = dir + "/e2fsck";
  WriteScript(fsck, R"(#!/bin/sh
trap "" TERM
echo $$ > "$0.tmp"; mv "$0.tmp" "$0.pid"
while [ -e "$1" ]; do sleep 0.1; done
)");
  return WriteScript(dir + "/fake-share-manager", "#!/bin/sh\ntrap '' TERM\n" + fsck + " " + dir +
                                                      "/checking &\nwhile :; do sleep 0.1; done\n");
}

// A share-manager stand-in that is one process (no children, nothing that
// changes its record) and dies on SIGTERM.
std::string FakeQuietShareManager(const std::string& dir) {
  return WriteScript(dir + "/fake-quiet-share-manager", "#!/bin/sh\nexec sleep 60\n");
}

// A share-manager stand-in that writes each SIGCONT and SIGTERM it gets to
// <its path>.signals ("CONT", "TERM"), and exits on SIGTERM.
std::string FakeSignalLoggingShareManager(const std::string& dir) {
  return WriteScript(dir + "/fake-logging-share-manager", R"(#!/bin/sh
trap 'echo CONT >> "$0.signals"' CONT
trap 'echo TERM >> "$0.signals"; exit 0' TERM
while :; do sleep 0.1; done
)");
}

sharemanager::controller::v1::ShareSpec Spec(const std::string& volume) {
  sharemanager::controller::v1::ShareSpec spec;
  spec.set_volume(volume);
  spec.set_serve(true);
  return spec;
}

// A TCP socket bound to 127.0.0.1:port; empty when the port is taken.
base::UniqueFd BindLoopback(uint16_t port) {
  base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (!fd || bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return {};
  return fd;
}

// A runtime over `options.work_dir`; the test stops when it cannot be opened.
std::unique_ptr<LocalPodRuntime> OpenRuntime(LocalPodRuntimeOptions options) {
  auto runtime = LocalPodRuntime::Open(std::move(options));
  REQUIRE_MESSAGE(runtime.ok(), runtime.status().ToString());
  return *std::move(runtime);
}

// The pid a fake writes to `pid_file`, handed to `reaper`; the test stops
// when it does not appear.
pid_t WaitPidFile(const std::string& pid_file, Reaper& reaper) {
  pid_t pid = 0;
  WaitFor(
      [&] {
        auto text = base::ReadFile(pid_file);
        return text.ok() && (pid = std::atoi(text->c_str())) > 0;
      },
      milliseconds(5000));
  REQUIRE(pid > 0);
  reaper.Add(pid);
  return pid;
}

// The fake ganesha's pid from `state_dir`.
pid_t WaitGanesha(const std::string& state_dir, Reaper& reaper) {
  return WaitPidFile(state_dir + "/ganesha.pid", reaper);
}

// The fake filesystem check's pid from FakeShareManagerWithFsck's `bin_dir`.
pid_t WaitFsck(const std::string& bin_dir, Reaper& reaper) {
  return WaitPidFile(bin_dir + "/e2fsck.pid", reaper);
}

// A child running `argv` (handed to `reaper`) and its start ticks: a live
// process for records to name. SIGTERM reaches it, as it would a pod (the
// test process blocks SIGTERM, and a child would inherit that).
std::pair<pid_t, uint64_t> StartChild(Reaper& reaper, std::vector<const char*> argv) {
  argv.push_back(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvp(argv[0], const_cast<char* const*>(argv.data()));
    _exit(127);
  }
  reaper.Add(pid);
  return {pid, RequireOk(base::ReadProcStat(pid)).start_ticks};
}

// A `sleep 30` child (see StartChild): dies of SIGTERM.
std::pair<pid_t, uint64_t> StartSleeper(Reaper& reaper) {
  return StartChild(reaper, {"sleep", "30"});
}

// Writes <work_dir>/vol/pods/<file>: pod `name` of volume "vol", its
// share-manager `pid`, then `rest` (start_ticks= and what else it says).
void WriteRecord(const std::string& work_dir, const std::string& file, const std::string& name,
                 uint64_t epoch, pid_t pid, const std::string& rest) {
  REQUIRE(base::EnsureDirectory(work_dir + "/vol/pods", 0755).ok());
  REQUIRE(base::WriteFileAtomically(work_dir + "/vol/pods/" + file,
                                    "name=" + name +
                                        "\nvolume=vol\nepoch=" + std::to_string(epoch) +
                                        "\npid=" + std::to_string(pid) + "\n" + rest +
                                        "started_unix_ms=1\nendpoint=127.0.0.1:1\nnfs_port=2\n")
              .ok());
}

// Pod 1 of volume "vol" in `runtime` (over `work_dir`, running
// FakeShareManager), once its ganesha runs; both handed to `reaper`.
Pod CreateWithGanesha(LocalPodRuntime& runtime, const std::string& work_dir, Reaper& reaper) {
  const Pod pod = RequireOk(runtime.Create(Spec("vol"), 1));
  reaper.Add(runtime.Pid(pod.name));
  WaitGanesha(work_dir + "/vol/state", reaper);
  return pod;
}

// Waits until `runtime` lists no pod of `volume`.
bool WaitNoPods(LocalPodRuntime& runtime, milliseconds timeout, const std::string& volume = "vol") {
  return WaitFor(
      [&] {
        auto now = runtime.List(volume);
        return now.ok() && now->empty();
      },
      timeout);
}

// The steady clock's now in ms, as a record's delete_started_ms says it.
int64_t SteadyNowMs() {
  return std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
}

// The record files left under <work_dir>/vol/pods.
int RecordCount(const std::string& work_dir) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(work_dir + "/vol/pods")) {
    n += entry.path().extension() == ".pod";
  }
  return n;
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

namespace {

// Records a pod whose pid is now someone else's live process, the record
// telling them apart as `identity(start_ticks)` says (its start_ticks= and
// boot_id= lines): the pod must be listed as gone, and deleted without that
// process ever being signalled.
void CheckRecordOfAnotherProcess(const std::function<std::string(uint64_t)>& identity) {
  testing_support::TempDir dir;
  Reaper reaper;
  const auto [other, start_ticks] = StartSleeper(reaper);
  const std::string name = PodName("vol", 4);
  WriteRecord(dir.path(), name + ".pod", name, 4, other, identity(start_ticks));
  auto runtime = OpenRuntime({.work_dir = dir.path(), .termination_grace = milliseconds(200)});
  auto pods = runtime->List("vol");
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);  // listed: a record is never read as "no pod"
  CHECK((*pods)[0].name == name);
  CHECK((*pods)[0].phase == PodPhase::kFailed);  // gone, not Running
  CHECK(runtime->Delete(name).ok());
  pods = runtime->List("vol");
  REQUIRE(pods.ok());
  CHECK(pods->empty());
  // A negative wait, the assertion itself: three monitor passes (100 ms) and
  // the pid's present owner was never signalled.
  std::this_thread::sleep_for(milliseconds(300));
  CHECK(base::ProcessAlive(other, start_ticks));
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/vol/pods/" + name + ".pod"));
  runtime->Shutdown();
}

}  // namespace

TEST_CASE("local runtime: ports are picked below the kernel's ephemeral range") {
  // Outgoing connections take their local ports from the ephemeral range: a
  // volume's port there could be taken while its pod is down.
  auto range = base::ReadFile("/proc/sys/net/ipv4/ip_local_port_range");
  REQUIRE(range.ok());
  const int ephemeral_first = std::atoi(range->c_str());
  REQUIRE(ephemeral_first > 1024);
  testing_support::TempDir dir;
  LocalPortTable table(dir.path());
  for (int i = 0; i < 10; ++i) {
    auto ports = table.Get("vol-" + std::to_string(i));
    REQUIRE(ports.ok());
    CHECK(ports->grpc < ephemeral_first);
    CHECK(ports->nfs < ephemeral_first);
  }
}

TEST_CASE("local runtime: ports come at random from the range given, never a busy one") {
  // Six ports free now, then one of them taken by someone else.
  std::mt19937 random(std::random_device{}());
  uint16_t first = 0;
  for (int attempt = 0; attempt < 100 && first == 0; ++attempt) {
    const auto base = static_cast<uint16_t>(20000 + random() % 9990);
    bool all_free = true;
    for (uint16_t p = base; p < base + 6; ++p) {
      all_free = all_free && static_cast<bool>(BindLoopback(p));
    }
    if (all_free) first = base;
  }
  REQUIRE(first != 0);
  const base::UniqueFd busy = BindLoopback(static_cast<uint16_t>(first + 2));
  REQUIRE(busy);
  testing_support::TempDir dir;
  LocalPortTable table(dir.path(), {first, static_cast<uint16_t>(first + 5)});
  std::set<uint16_t> all;
  for (const std::string volume : {"vol-a", "vol-b"}) {
    auto ports = table.Get(volume);
    REQUIRE(ports.ok());
    all.insert({ports->grpc, ports->nfs});
  }
  CHECK(all.size() == 4);
  CHECK(*all.begin() >= first);
  CHECK(*all.rbegin() <= first + 5);
  CHECK_FALSE(all.contains(static_cast<uint16_t>(first + 2)));
  // One port left: not enough for a volume.
  CHECK(table.Get("vol-c").status().code() == absl::StatusCode::kResourceExhausted);

  // Random, not in order: two work dirs side by side rarely pick the same.
  testing_support::TempDir other_dir;
  LocalPortTable one(dir.path() + "/one"), two(other_dir.path());
  REQUIRE(base::EnsureDirectory(dir.path() + "/one", 0755).ok());
  std::set<uint16_t> first_dir, common;
  for (int i = 0; i < 10; ++i) {
    auto a = one.Get("vol-" + std::to_string(i));
    auto b = two.Get("vol-" + std::to_string(i));
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    first_dir.insert({a->grpc, a->nfs});
    for (uint16_t p : {b->grpc, b->nfs}) {
      if (first_dir.contains(p)) common.insert(p);
    }
  }
  CHECK(common.size() < 5);  // 20 of 10000 each: ~0.04 in common on average
}

TEST_CASE("local runtime: a port range must lie below the kernel's ephemeral range") {
  const auto ephemeral = base::EphemeralPortRange();
  REQUIRE(ephemeral.ok());
  REQUIRE(ephemeral->first > 20001);
  // Clipped to end below it.
  auto usable = LocalPortTable::Usable({20000, 65535});
  REQUIRE(usable.ok());
  CHECK(usable->first == 20000);
  CHECK(usable->last == ephemeral->first - 1);
  // Nothing left: refused, by the runtime too, saying why.
  CHECK(LocalPortTable::Usable({ephemeral->first, ephemeral->last}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  testing_support::TempDir dir;
  auto runtime = LocalPodRuntime::Open(
      {.work_dir = dir.path(), .port_range = {ephemeral->first, ephemeral->last}});
  REQUIRE_FALSE(runtime.ok());
  CHECK(runtime.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(runtime.status().message().find("ephemeral") != std::string::npos);

  // The flag's syntax.
  auto parsed = base::ParsePortRange("20000-29999");
  REQUIRE(parsed.ok());
  CHECK(parsed->first == 20000);
  CHECK(parsed->last == 29999);
  for (const std::string bad : {"", "20000", "5-3", "0-10", "1-70000", "a-b", "1-2-3", "-1-2"}) {
    CAPTURE(bad);
    CHECK(base::ParsePortRange(bad).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("local runtime: a pod record whose pid was reused is not adopted, and is reported gone") {
  CheckRecordOfAnotherProcess([](uint64_t start_ticks) {
    return "start_ticks=" + std::to_string(start_ticks - 1) + "\n";  // started after the pod
  });
}

TEST_CASE("local runtime: a pod record from another boot is not adopted, and is reported gone") {
  // Start ticks count from boot: after a reboot another process may match.
  CheckRecordOfAnotherProcess([](uint64_t start_ticks) {
    return "start_ticks=" + std::to_string(start_ticks) +
           "\nboot_id=00000000-0000-4000-8000-000000000000\n";
  });
}

TEST_CASE("local runtime: an unreadable pod record fails List instead of reading as no pod") {
  testing_support::TempDir dir;
  REQUIRE(base::EnsureDirectory(dir.path() + "/vol/pods", 0755).ok());
  REQUIRE(base::WriteFileAtomically(dir.path() + "/vol/pods/x.pod", "garbage\n").ok());
  auto runtime = OpenRuntime({.work_dir = dir.path()});
  CHECK_FALSE(runtime->List("vol").ok());
  CHECK(runtime->List("other").ok());
}

TEST_CASE(
    "local runtime: of two records of one pod the one naming live processes is kept, loudly, and "
    "the other's live processes still die with the pod") {
  testing_support::TempDir dir;
  LogCapture log;  // outlives the runtime
  Reaper reaper;
  const std::string name = PodName("vol", 4);
  const auto [a, a_start] = StartSleeper(reaper);
  const auto [b, b_start] = StartSleeper(reaper);
  WriteRecord(dir.path(), "a.pod", name, 4, a, "start_ticks=" + std::to_string(a_start) + "\n");
  WriteRecord(dir.path(), "b.pod", name, 4, b, "start_ticks=" + std::to_string(b_start) + "\n");
  // A newer epoch, but its process is gone: not the one kept.
  const auto [dead, dead_start] = StartSleeper(reaper);
  kill(dead, SIGKILL);
  waitpid(dead, nullptr, 0);
  WriteRecord(dir.path(), "c.pod", name, 9, dead,
              "start_ticks=" + std::to_string(dead_start) + "\n");

  auto runtime = OpenRuntime({.work_dir = dir.path(), .termination_grace = milliseconds(200)});
  auto pods = runtime->List("vol");
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  CHECK((*pods)[0].phase == PodPhase::kRunning);
  CHECK((*pods)[0].epoch == 4);
  const pid_t kept = runtime->Pid(name);
  CHECK((kept == a || kept == b));
  CHECK(log.Count(name + ": two records name it") == 2);
  for (const std::string file : {"a.pod", "b.pod", "c.pod"}) {
    CAPTURE(file);
    CHECK(log.Count(dir.path() + "/vol/pods/" + file) >= 1);
  }

  REQUIRE(runtime->Delete(name).ok());
  CHECK(WaitNoPods(*runtime, milliseconds(3000)));
  CHECK_FALSE(base::ProcessAlive(a, a_start));
  CHECK_FALSE(base::ProcessAlive(b, b_start));
  CHECK(WaitFor([&] { return RecordCount(dir.path()) == 0; }, milliseconds(2000)));
  runtime->Shutdown();
}

TEST_CASE(
    "local runtime: of two records of one pod, a delete under way in the one dropped carries over "
    "to the one kept") {
  testing_support::TempDir dir;
  Reaper reaper;
  const std::string name = PodName("vol", 4);
  // Lives through SIGTERM, and writes <dir>/term when it gets one.
  const std::string term = dir.path() + "/term";
  const std::pair<pid_t, uint64_t> live = StartChild(
      reaper,
      {"sh", "-c", "trap 'echo TERM > \"$0\"' TERM; while :; do sleep 0.1; done", term.c_str()});
  WriteRecord(dir.path(), "a.pod", name, 4, live.first,
              "start_ticks=" + std::to_string(live.second) + "\n");
  // Its process is gone: not the one kept. Its delete began.
  const auto [dead, dead_start] = StartSleeper(reaper);
  kill(dead, SIGKILL);
  waitpid(dead, nullptr, 0);
  WriteRecord(dir.path(), "b.pod", name, 9, dead,
              "start_ticks=" + std::to_string(dead_start) +
                  "\nstate=deleting\ndelete_started_ms=" + std::to_string(SteadyNowMs()) + "\n");

  // The grace counts from the delete_started_ms above: long enough that the
  // checks below see the pod still terminating on a loaded machine.
  auto runtime = OpenRuntime({.work_dir = dir.path(), .termination_grace = milliseconds(4000)});
  CHECK(runtime->Pid(name) == live.first);
  auto pods = runtime->List("vol");
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  CHECK((*pods)[0].terminating);
  CHECK(runtime->Delete(name).code() == absl::StatusCode::kUnavailable);  // under way
  // The kept record says so before the dropped one goes; the kept pod's
  // share-manager got its SIGTERM.
  CHECK(WaitFor([&] { return RecordCount(dir.path()) == 1; }, milliseconds(2000)));
  CHECK(RequireOk(base::ReadFile(dir.path() + "/vol/pods/a.pod")).find("\nstate=deleting\n") !=
        std::string::npos);
  CHECK(WaitFor([&] { return std::filesystem::exists(term); }, milliseconds(2000)));
  // Then SIGKILL at the grace.
  CHECK(WaitNoPods(*runtime, milliseconds(10'000)));
  CHECK_FALSE(base::ProcessAlive(live.first, live.second));
  CHECK(WaitFor([&] { return RecordCount(dir.path()) == 0; }, milliseconds(2000)));
  runtime->Shutdown();
}

TEST_CASE(
    "local runtime: a pod record without a start time, or naming this process or an ancestor of "
    "it, is refused on load, and its pid never signalled") {
  testing_support::TempDir dir;
  Reaper reaper;
  const auto [other, start_ticks] = StartSleeper(reaper);
  const std::string name = PodName("vol", 4);
  std::string refusal = "start_ticks 0";  // what the refusal says
  SUBCASE("this process as its share-manager") {
    refusal = "ancestor";
    WriteRecord(dir.path(), "x.pod", name, 4, getpid(),
                "start_ticks=" +
                    std::to_string(RequireOk(base::ReadProcStat(getpid())).start_ticks) + "\n");
  }
  SUBCASE("an ancestor among its processes") {
    refusal = "ancestor";
    WriteRecord(dir.path(), "x.pod", name, 4, other,
                "start_ticks=" + std::to_string(start_ticks) +
                    "\nprocs=" + std::to_string(getppid()) + ":" +
                    std::to_string(RequireOk(base::ReadProcStat(getppid())).start_ticks) + "\n");
  }
  SUBCASE("the share-manager's") {
    WriteRecord(dir.path(), "x.pod", name, 4, other, "start_ticks=0\n");
  }
  SUBCASE("another process's") {
    WriteRecord(dir.path(), "x.pod", name, 4, other,
                "start_ticks=" + std::to_string(start_ticks - 1) +
                    "\nprocs=" + std::to_string(other) + ":0\n");
  }
  auto runtime = OpenRuntime({.work_dir = dir.path(), .termination_grace = milliseconds(200)});
  // Neither "no pod" (a second server) nor a pod whose pid could be anyone's.
  const auto pods = runtime->List("vol");
  REQUIRE_FALSE(pods.ok());
  CHECK(pods.status().code() == absl::StatusCode::kDataLoss);
  CHECK(pods.status().message().find(refusal) != std::string::npos);
  CHECK(runtime->Delete(name).ok());               // nothing known to delete
  std::this_thread::sleep_for(milliseconds(300));  // a negative wait: three monitor passes
  CHECK(base::ProcessAlive(other, start_ticks));
  CHECK(std::filesystem::exists(dir.path() + "/vol/pods/x.pod"));  // left for a human
  runtime->Shutdown();
}

TEST_CASE(
    "local runtime: a dead pod's record never takes over the ganesha a live pod of its volume "
    "tracks, whichever record is loaded first") {
  testing_support::TempDir dir;
  Reaper reaper;
  // The dead pod's share-manager started before the ganesha, which its
  // ganesha.pid lookup could claim then.
  const auto [dead, dead_start] = StartSleeper(reaper);
  kill(dead, SIGKILL);
  waitpid(dead, nullptr, 0);
  std::this_thread::sleep_for(milliseconds(20));  // a later start tick
  // A "ganesha" (so /proc names it) that dies of SIGTERM, in the volume's
  // ganesha.pid, tracked by the live pod's record.
  const std::string ganesha_binary = dir.path() + "/ganesha.nfsd";
  std::filesystem::copy_file("/bin/sleep", ganesha_binary);
  const std::pair<pid_t, uint64_t> ganesha = StartChild(reaper, {ganesha_binary.c_str(), "30"});
  REQUIRE(base::EnsureDirectory(dir.path() + "/vol/state", 0755).ok());
  REQUIRE(base::WriteFileAtomically(dir.path() + "/vol/state/ganesha.pid",
                                    std::to_string(ganesha.first) + "\n")
              .ok());
  const std::pair<pid_t, uint64_t> live = StartSleeper(reaper);
  // Both records written in one order; which epoch is the dead one decides
  // whether it is listed first (by name or by creation): one subcase loads
  // the dead record before the live one.
  uint64_t dead_epoch = 0;
  SUBCASE("the dead pod is the older epoch") { dead_epoch = 1; }
  SUBCASE("the dead pod is the newer epoch") { dead_epoch = 2; }
  for (uint64_t epoch : {uint64_t{1}, uint64_t{2}}) {
    const std::string name = PodName("vol", epoch);
    if (epoch == dead_epoch) {
      WriteRecord(dir.path(), name + ".pod", name, epoch, dead,
                  "start_ticks=" + std::to_string(dead_start) + "\n");
    } else {
      WriteRecord(dir.path(), name + ".pod", name, epoch, live.first,
                  "start_ticks=" + std::to_string(live.second) + "\nprocs=" +
                      std::to_string(live.first) + ":" + std::to_string(live.second) + "," +
                      std::to_string(ganesha.first) + ":" + std::to_string(ganesha.second) + "\n");
    }
  }
  auto runtime = OpenRuntime(
      {.work_dir = dir.path(), .termination_grace = milliseconds(200), .stop_pods_on_exit = false});
  REQUIRE(RequireOk(runtime->List("vol")).size() == 2);
  REQUIRE(runtime->Delete(PodName("vol", dead_epoch)).ok());
  CHECK(WaitFor(
      [&] {
        auto pods = runtime->List("vol");
        return pods.ok() && pods->size() == 1;
      },
      milliseconds(3000)));
  std::this_thread::sleep_for(milliseconds(400));  // a negative wait: past the grace
  CHECK(base::ProcessAlive(ganesha.first, ganesha.second));
  runtime->ShutdownLeavingPods();
}

TEST_CASE("local runtime: Create refuses a volume name that is no directory name") {
  testing_support::TempDir dir;
  auto runtime = OpenRuntime({.work_dir = dir.path()});
  for (const std::string volume : {"..", "a/b", ""}) {
    CAPTURE(volume);
    CHECK(runtime->Create(Spec(volume), 1).status().code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/a"));
  runtime->Shutdown();
}

TEST_CASE("local runtime: Delete reports a pod gone only after its ganesha is gone") {
  testing_support::TempDir dir;
  Reaper reaper;
  auto runtime = OpenRuntime({.share_manager_binary = FakeShareManager(dir.path()),
                              .work_dir = dir.path(),
                              .termination_grace = milliseconds(1500)});
  auto pod = runtime->Create(Spec("vol"), 1);
  REQUIRE(pod.ok());
  const pid_t share_manager = runtime->Pid(pod->name);
  reaper.Add(share_manager);
  const pid_t ganesha = WaitGanesha(dir.path() + "/vol/state", reaper);
  const auto ganesha_start = RequireOk(base::ReadProcStat(ganesha)).start_ticks;
  // List refreshes the pod from /proc: its ganesha, a child of the running
  // share-manager now, is one of the pod's processes from here on.
  REQUIRE(runtime->List("vol").ok());

  const auto asked = Clock::now();
  REQUIRE(runtime->Delete(pod->name).ok());
  CHECK(Clock::now() - asked < milliseconds(500));  // Delete does not wait
  // The share-manager exits at once (the pod turns Failed); its ganesha
  // ignores SIGTERM: still listed, terminating.
  std::vector<Pod> pods;
  REQUIRE(WaitFor(
      [&] {
        pods = RequireOk(runtime->List("vol"));
        return pods.size() == 1 && pods[0].phase == PodPhase::kFailed;
      },
      milliseconds(1000)));
  CHECK(pods[0].terminating);
  CHECK(base::ProcessAlive(ganesha, ganesha_start));
  // The exited share-manager was reaped (off the runtime's lock), not left a zombie.
  CHECK(
      WaitFor([&] { return !base::ReadProcStat(share_manager).has_value(); }, milliseconds(5000)));
  CHECK(runtime->Delete(pod->name).code() == absl::StatusCode::kUnavailable);
  // After the grace, SIGKILL: then, and only then, gone.
  CHECK(WaitNoPods(*runtime, milliseconds(5000)));
  CHECK_FALSE(base::ProcessAlive(ganesha, ganesha_start));
  CHECK(Clock::now() - asked >= milliseconds(1500));
  runtime->Shutdown();
}

TEST_CASE("local runtime: a share's own --stop-timeout sets its pod's termination grace") {
  testing_support::TempDir dir;
  Reaper reaper;
  // The runtime's flag alone would give 2 x 30 s + 5 s; the share's own comes
  // later in the daemon's argv and wins: 2 x 0 s + 5 s.
  auto runtime = OpenRuntime({.share_manager_binary = FakeShareManager(dir.path()),
                              .work_dir = dir.path(),
                              .daemon_flags = {"--stop-timeout", "30s"},
                              .stop_pods_on_exit = false});
  auto spec = Spec("vol");
  spec.add_daemon_flags("--stop-timeout");
  spec.add_daemon_flags("0s");
  auto pod = runtime->Create(spec, 1);
  REQUIRE(pod.ok());
  reaper.Add(runtime->Pid(pod->name));
  WaitGanesha(dir.path() + "/vol/state", reaper);
  CHECK(runtime->TerminationGrace(pod->name) == milliseconds(5000));
  // The pod keeps it in a runtime that adopts it (from its record).
  runtime.reset();
  runtime = OpenRuntime({.share_manager_binary = FakeShareManager(dir.path()),
                         .work_dir = dir.path(),
                         .daemon_flags = {"--stop-timeout", "30s"}});
  CHECK(runtime->TerminationGrace(pod->name) == milliseconds(5000));
  // List refreshes the pod from /proc: the share-manager's child is one of
  // the pod's processes from here on.
  REQUIRE(runtime->List("vol").ok());

  // Its ganesha ignores SIGTERM: gone only by the SIGKILL at the pod's grace.
  const auto asked = Clock::now();
  REQUIRE(runtime->Delete(pod->name).ok());
  CHECK(WaitNoPods(*runtime, milliseconds(12'000)));
  CHECK(Clock::now() - asked >= milliseconds(5000));
  runtime->Shutdown();
}

TEST_CASE(
    "local runtime: a filesystem check is never SIGKILLed, and its pod stays terminating until it "
    "ends") {
  testing_support::TempDir dir;
  LogCapture log;  // outlives the runtime
  Reaper reaper;
  REQUIRE(base::EnsureDirectory(dir.path() + "/bin", 0755).ok());
  std::ofstream(dir.path() + "/bin/checking") << "";
  auto runtime = OpenRuntime({.share_manager_binary = FakeShareManagerWithFsck(dir.path() + "/bin"),
                              .work_dir = dir.path(),
                              .termination_grace = milliseconds(300)});
  auto pod = runtime->Create(Spec("vol"), 1);
  REQUIRE(pod.ok());
  const pid_t share_manager = runtime->Pid(pod->name);
  reaper.Add(share_manager);
  const pid_t fsck = WaitFsck(dir.path() + "/bin", reaper);
  const auto fsck_stat = base::ReadProcStat(fsck);
  REQUIRE(fsck_stat.has_value());
  CHECK(fsck_stat->comm == "e2fsck");
  CHECK(fsck_stat->pgrp == share_manager);  // a group SIGKILL would reach it too
  // List refreshes the pod from /proc: the share-manager's child is one of
  // the pod's processes from here on.
  REQUIRE(runtime->List("vol").ok());

  REQUIRE(runtime->Delete(pod->name).ok());
  // Past the grace: the share-manager got its SIGKILL (and was reaped), the
  // check did not.
  CHECK(WaitFor([&] { return kill(share_manager, 0) != 0; }, milliseconds(3000)));
  std::this_thread::sleep_for(milliseconds(500));  // a negative wait: the point
  CHECK(base::ProcessAlive(fsck, fsck_stat->start_ticks));
  auto pods = runtime->List("vol");
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);  // still listed: no replacement on the device meanwhile
  CHECK((*pods)[0].terminating);
  CHECK(log.Count(pod->name + ": a filesystem check") == 1);  // said once, not every pass

  std::filesystem::remove(dir.path() + "/bin/checking");  // the check ends by itself
  CHECK(WaitNoPods(*runtime, milliseconds(5000)));
  CHECK_FALSE(base::ProcessAlive(fsck, fsck_stat->start_ticks));
  runtime->Shutdown();
}

TEST_CASE(
    "local runtime: a runtime that adopts a deleting pod waits for the filesystem check that "
    "outlived its share-manager, and never SIGKILLs it") {
  testing_support::TempDir dir;
  Reaper reaper;
  REQUIRE(base::EnsureDirectory(dir.path() + "/bin", 0755).ok());
  std::ofstream(dir.path() + "/bin/checking") << "";
  const LocalPodRuntimeOptions options{
      .share_manager_binary = FakeShareManagerWithFsck(dir.path() + "/bin"),
      .work_dir = dir.path(),
      .termination_grace = milliseconds(300),
      .stop_pods_on_exit = false};
  auto first = OpenRuntime(options);
  auto pod = first->Create(Spec("vol"), 1);
  REQUIRE(pod.ok());
  const pid_t share_manager = first->Pid(pod->name);
  reaper.Add(share_manager);
  const pid_t fsck = WaitFsck(dir.path() + "/bin", reaper);
  const auto fsck_start = RequireOk(base::ReadProcStat(fsck)).start_ticks;
  REQUIRE(first->List("vol").ok());  // the share-manager's child is the pod's from here on
  // The record names it, with its start time, as soon as it is tracked.
  const std::string record = dir.path() + "/vol/pods/" + pod->name + ".pod";
  const std::string fsck_entry = std::to_string(fsck) + ":" + std::to_string(fsck_start);
  CHECK(WaitFor(
      [&] {
        auto text = base::ReadFile(record);
        return text.ok() && text->find(fsck_entry) != std::string::npos;
      },
      milliseconds(2000)));

  // The delete SIGKILLs the share-manager after the grace and spares the
  // check; then the controller restarts.
  REQUIRE(first->Delete(pod->name).ok());
  REQUIRE(WaitFor([&] { return kill(share_manager, 0) != 0; }, milliseconds(3000)));
  first->ShutdownLeavingPods();
  first.reset();
  REQUIRE(base::ProcessAlive(fsck, fsck_start));

  auto second = OpenRuntime(options);
  auto pods = second->List("vol");
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);  // not gone: a replacement would mount under the check
  CHECK((*pods)[0].terminating);
  CHECK((*pods)[0].phase == PodPhase::kFailed);
  CHECK(second->Delete(pod->name).code() == absl::StatusCode::kUnavailable);  // under way
  std::this_thread::sleep_for(milliseconds(600));  // a negative wait, twice the grace
  CHECK(base::ProcessAlive(fsck, fsck_start));
  CHECK(RequireOk(second->List("vol")).size() == 1);

  std::filesystem::remove(dir.path() + "/bin/checking");  // the check ends by itself
  CHECK(WaitNoPods(*second, milliseconds(5000)));
  CHECK_FALSE(base::ProcessAlive(fsck, fsck_start));
  CHECK(WaitFor([&] { return !std::filesystem::exists(record); }, milliseconds(2000)));
  second->Shutdown();
}

TEST_CASE(
    "local runtime: a second runtime is refused while the first holds the work dir, then adopts "
    "its running pod") {
  testing_support::TempDir dir;
  Reaper reaper;
  const std::string binary = FakeShareManager(dir.path());
  auto first = OpenRuntime({.share_manager_binary = binary,
                            .work_dir = dir.path(),
                            .termination_grace = milliseconds(500),
                            .stop_pods_on_exit = false});
  auto pod = first->Create(Spec("vol"), 3);
  REQUIRE(pod.ok());
  const Pod created = *pod;
  // Its pid and start time are this boot's.
  auto record = base::ReadFile(dir.path() + "/vol/pods/" + pod->name + ".pod");
  REQUIRE(record.ok());
  REQUIRE(base::BootId().has_value());
  CHECK(record->find("\nboot_id=" + *base::BootId() + "\n") != std::string::npos);
  const pid_t pid = first->Pid(pod->name);
  reaper.Add(pid);
  // The share-manager is told its instance id, which it reports in its status.
  REQUIRE(created.uid.size() == 32);
  // Once it has exec'd (the held shell carries the uid too, but the exec may
  // be under way, its command line empty meanwhile).
  CHECK(WaitFor(
      [&] {
        auto cmdline = base::ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
        return cmdline.ok() && cmdline->find(std::string("--pod-uid") + '\0' + created.uid +
                                             '\0') != std::string::npos;
      },
      milliseconds(2000)));
  WaitGanesha(dir.path() + "/vol/state", reaper);

  // Both would adopt, delete and replace the same pods: the second is refused
  // while the first holds the work dir, in this process as in another.
  const LocalPodRuntimeOptions options{.share_manager_binary = binary,
                                       .work_dir = dir.path(),
                                       .termination_grace = milliseconds(500)};
  auto refused = LocalPodRuntime::Open(options);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(refused.status().message() ==
        "another pod runtime holds " + dir.path() + " (pid " + std::to_string(getpid()) + ")");
  first.reset();  // shut down; the pod keeps running

  REQUIRE(kill(pid, 0) == 0);
  // Before `second`: a failed REQUIRE unwinds `second` (whose threads may
  // call the watcher) before what the watcher touches.
  std::atomic<int> heard{0};
  auto second = OpenRuntime(options);
  auto pods = second->List("vol");
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  CHECK((*pods)[0].name == created.name);
  CHECK((*pods)[0].epoch == 3);
  CHECK((*pods)[0].phase == PodPhase::kRunning);
  CHECK((*pods)[0].endpoint == created.endpoint);
  CHECK((*pods)[0].nfs_port == created.nfs_port);
  CHECK((*pods)[0].started_unix_ms == created.started_unix_ms);
  CHECK((*pods)[0].uid == created.uid);  // from the record: still the instance that answers
  CHECK(second->Pid(created.name) == pid);
  CHECK(second->NfsPort("vol") == created.nfs_port);

  // Not our child any more: its exit is still seen (pidfd), and only once its
  // ganesha is gone too.
  second->Watch([&](const std::string&) { ++heard; });
  REQUIRE(second->Delete(created.name).ok());
  CHECK(WaitNoPods(*second, milliseconds(5000)));
  CHECK(heard > 0);
  second->Shutdown();
}

TEST_CASE(
    "local runtime: ShutdownLeavingPods keeps every pod running whatever stop_pods_on_exit says, "
    "for the next runtime to adopt") {
  testing_support::TempDir dir;
  Reaper reaper;
  const LocalPodRuntimeOptions options{.share_manager_binary = FakeShareManager(dir.path()),
                                       .work_dir = dir.path(),
                                       .termination_grace = milliseconds(500),
                                       .stop_pods_on_exit = true};
  auto first = OpenRuntime(options);
  auto pod = first->Create(Spec("vol"), 1);
  REQUIRE(pod.ok());
  const pid_t pid = first->Pid(pod->name);
  reaper.Add(pid);
  const pid_t ganesha = WaitGanesha(dir.path() + "/vol/state", reaper);
  first->ShutdownLeavingPods();  // as a share-controller that failed to start
  first.reset();
  CHECK(kill(pid, 0) == 0);
  CHECK(kill(ganesha, 0) == 0);

  auto second = OpenRuntime(options);
  auto pods = second->List("vol");
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  CHECK((*pods)[0].phase == PodPhase::kRunning);
  second->Shutdown();  // stop_pods_on_exit: this one deletes it
  CHECK(WaitFor([&] { return kill(ganesha, 0) != 0; }, milliseconds(5000)));
}

TEST_CASE(
    "local runtime: two Creates of one pod at once start one share-manager, a gone pod's name "
    "can be created again, and a volume named 'ports' is a volume like any other") {
  testing_support::TempDir dir;
  Reaper reaper;
  auto runtime = OpenRuntime({.share_manager_binary = FakeShareManager(dir.path()),
                              .work_dir = dir.path(),
                              .termination_grace = milliseconds(300)});
  std::vector<absl::StatusOr<Pod>> results(4, absl::UnknownError("not run"));
  {
    std::vector<std::jthread> callers;
    for (auto& result : results) {
      callers.emplace_back([&runtime, &result] { result = runtime->Create(Spec("ports"), 1); });
    }
  }
  int created = 0;
  for (const auto& result : results) {
    if (result.ok()) {
      ++created;
      reaper.Add(runtime->Pid(result->name));
    } else {
      CHECK(result.status().code() == absl::StatusCode::kAlreadyExists);
    }
  }
  CHECK(created == 1);
  // The port table is not in the way of a volume's directory, nor the reverse.
  auto other = runtime->Create(Spec("vol-b"), 1);
  REQUIRE_MESSAGE(other.ok(), other.status().ToString());
  reaper.Add(runtime->Pid(other->name));
  CHECK(RequireOk(runtime->List("ports")).size() == 1);
  // Once gone, its name is free again: a Create of it is no longer under way.
  REQUIRE(runtime->Delete(other->name).ok());
  REQUIRE(WaitNoPods(*runtime, milliseconds(5000), "vol-b"));
  auto again = runtime->Create(Spec("vol-b"), 1);
  REQUIRE_MESSAGE(again.ok(), again.status().ToString());
  reaper.Add(runtime->Pid(again->name));
  runtime->Shutdown();
}

TEST_CASE(
    "local runtime: a record write stuck on one pod's disk holds up no other pod's Delete, List or "
    "removal") {
  testing_support::TempDir dir;
  Reaper reaper;
  // Writes of vol-a's records block, while `block_a`, until released (at
  // most 10 s: a runtime that waits for them fails the test, not hangs it).
  std::atomic<bool> block_a{false};
  std::atomic<bool> a_stuck{false};
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  LocalPodRuntimeOptions options{.share_manager_binary = FakeQuietShareManager(dir.path()),
                                 .work_dir = dir.path(),
                                 .termination_grace = milliseconds(300)};
  options.write_record = [&](const std::string& path, const std::string& text,
                             base::Durability durability) {
    if (block_a && path.find("/vol-a/") != std::string::npos) {
      a_stuck = true;
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::seconds(10), [&] { return released; });
      a_stuck = false;
    }
    return base::WriteFileAtomically(path, text, 0644, durability);
  };
  auto runtime = OpenRuntime(options);
  const Pod a = RequireOk(runtime->Create(Spec("vol-a"), 1));
  reaper.Add(runtime->Pid(a.name));
  const Pod b = RequireOk(runtime->Create(Spec("vol-b"), 1));
  reaper.Add(runtime->Pid(b.name));
  const std::string b_record = dir.path() + "/vol-b/pods/" + b.name + ".pod";
  REQUIRE(std::filesystem::exists(b_record));

  block_a = true;
  std::future<absl::Status> a_deleted;
  SUBCASE("A's Delete is writing A's record") {
    a_deleted = std::async(std::launch::async, [&] { return runtime->Delete(a.name); });
  }
  SUBCASE("the runtime is rewriting A's record (its process exited)") {
    kill(runtime->Pid(a.name), SIGKILL);
  }
  REQUIRE(WaitFor([&] { return a_stuck.load(); }, milliseconds(5000)));

  const auto asked = Clock::now();
  CHECK(runtime->Delete(b.name).ok());
  CHECK(runtime->List("vol-b").ok());
  CHECK(runtime->List("vol-a").ok());
  CHECK(Clock::now() - asked < milliseconds(2000));
  CHECK(a_stuck);  // none of them waited for A's write
  // Nor does B's removal wait: B's share-manager died of its SIGTERM.
  CHECK(WaitNoPods(*runtime, milliseconds(5000), "vol-b"));
  CHECK(a_stuck);

  {
    std::lock_guard lock(mu);
    released = true;
  }
  cv.notify_all();
  if (a_deleted.valid()) {
    CHECK(a_deleted.get().ok());
  } else {
    CHECK(runtime->Delete(a.name).ok());
  }
  CHECK(WaitNoPods(*runtime, milliseconds(5000), "vol-a"));
  CHECK(WaitFor([&] { return !std::filesystem::exists(b_record); }, milliseconds(2000)));
  runtime->Shutdown();
}

TEST_CASE(
    "local runtime: Delete records the delete durably before it signals anything, and fails "
    "without a signal when it cannot") {
  testing_support::TempDir dir;
  Reaper reaper;
  const std::string binary = FakeSignalLoggingShareManager(dir.path());
  const std::string signals = binary + ".signals";
  std::atomic<bool> fail_deleting{false};
  std::mutex mu;
  std::optional<base::Durability> first_durability;  // of the first record saying "deleting"
  std::optional<bool> signalled_before;              // whether the pod had a signal as it landed
  bool deleting_landed = false;                      // a record saying "deleting" is on disk
  LocalPodRuntimeOptions options{.share_manager_binary = binary,
                                 .work_dir = dir.path(),
                                 .termination_grace = milliseconds(5000)};
  options.write_record = [&](const std::string& path, const std::string& text,
                             base::Durability durability) {
    if (text.find("\nstate=deleting\n") != std::string::npos) {
      if (fail_deleting) return absl::UnavailableError("disk full");
      std::lock_guard lock(mu);
      if (!first_durability) {
        // A signal sent before this write would be in the log by now.
        std::this_thread::sleep_for(milliseconds(300));
        first_durability = durability;
        signalled_before = std::filesystem::exists(signals);
      }
      auto written = base::WriteFileAtomically(path, text, 0644, durability);
      deleting_landed = deleting_landed || written.ok();
      return written;
    }
    return base::WriteFileAtomically(path, text, 0644, durability);
  };
  auto runtime = OpenRuntime(options);
  const Pod pod = RequireOk(runtime->Create(Spec("vol"), 1));
  reaper.Add(runtime->Pid(pod.name));
  const std::string record = dir.path() + "/vol/pods/" + pod.name + ".pod";

  fail_deleting = true;
  const absl::Status failed = runtime->Delete(pod.name);
  CHECK(failed.code() == absl::StatusCode::kUnavailable);
  CHECK(failed.message().find("disk full") != std::string::npos);
  std::this_thread::sleep_for(milliseconds(300));  // a negative wait: no signal comes
  CHECK_FALSE(std::filesystem::exists(signals));
  auto pods = RequireOk(runtime->List("vol"));
  REQUIRE(pods.size() == 1);
  CHECK(pods[0].phase == PodPhase::kRunning);
  CHECK_FALSE(pods[0].terminating);
  CHECK(RequireOk(base::ReadFile(record)).find("state=deleting") == std::string::npos);

  fail_deleting = false;  // the reconciler tries again
  REQUIRE(runtime->Delete(pod.name).ok());
  {
    std::lock_guard lock(mu);
    REQUIRE(first_durability.has_value());
    CHECK(*first_durability == base::Durability::kFsync);
    CHECK_FALSE(*signalled_before);
    // Seen as it was written: read back from disk, the record may already be
    // gone (the pod exits on its TERM and its record is removed).
    CHECK(deleting_landed);
  }
  CHECK(WaitFor(
      [&] {
        auto text = base::ReadFile(signals);
        return text.ok() && text->find("TERM") != std::string::npos;
      },
      milliseconds(3000)));
  CHECK(WaitNoPods(*runtime, milliseconds(5000)));
  runtime->Shutdown();
}

TEST_CASE(
    "local runtime: a delete that lands on disk through the monitor's write while Delete's own "
    "fails goes on") {
  testing_support::TempDir dir;
  Reaper reaper;
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> failed_own{false};
  LocalPodRuntimeOptions options{.share_manager_binary = FakeShareManager(dir.path()),
                                 .work_dir = dir.path(),
                                 .termination_grace = milliseconds(300)};
  options.write_record = [&](const std::string& path, const std::string& text,
                             base::Durability durability) {
    if (text.find("\nstate=deleting\n") != std::string::npos &&
        std::this_thread::get_id() == caller && !failed_own.exchange(true)) {
      // Delete's own write: slow (the stand-in's children come and go, and
      // the monitor snapshots the record saying "deleting" meanwhile), then
      // failed.
      std::this_thread::sleep_for(milliseconds(500));
      return absl::UnavailableError("disk full");
    }
    return base::WriteFileAtomically(path, text, 0644, durability);
  };
  auto runtime = OpenRuntime(options);
  const Pod pod = CreateWithGanesha(*runtime, dir.path(), reaper);
  REQUIRE(runtime->List("vol").ok());
  const absl::Status deleted = runtime->Delete(pod.name);
  CHECK(failed_own);
  // Whatever Delete said (it cannot know of a write landing after it
  // returned), the record says deleting, so the pod is deleted.
  INFO(deleted.ToString());
  CHECK(WaitNoPods(*runtime, milliseconds(5000)));
  runtime->Shutdown();
}

TEST_CASE(
    "local runtime: Shutdown waits for the Deletes under way, and Delete is refused once it "
    "began") {
  testing_support::TempDir dir;
  Reaper reaper;
  std::atomic<bool> writing{false};
  LocalPodRuntimeOptions options{.share_manager_binary = FakeQuietShareManager(dir.path()),
                                 .work_dir = dir.path(),
                                 .termination_grace = milliseconds(300),
                                 .stop_pods_on_exit = false};
  options.write_record = [&](const std::string& path, const std::string& text,
                             base::Durability durability) {
    if (text.find("\nstate=deleting\n") != std::string::npos) {
      writing = true;
      std::this_thread::sleep_for(milliseconds(500));  // a slow disk
    }
    return base::WriteFileAtomically(path, text, 0644, durability);
  };
  auto runtime = OpenRuntime(options);
  const Pod pod = RequireOk(runtime->Create(Spec("vol"), 1));
  reaper.Add(runtime->Pid(pod.name));
  auto deleted = std::async(std::launch::async, [&] { return runtime->Delete(pod.name); });
  REQUIRE(WaitFor([&] { return writing.load(); }, milliseconds(3000)));
  runtime->ShutdownLeavingPods();
  // The Delete under way finished (its record written, its signal sent)
  // before the runtime stopped.
  CHECK(deleted.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
  CHECK(deleted.get().ok());
  CHECK(runtime->Delete(pod.name).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("local runtime: of two records of one pod, the longer stop timeout and grace are kept") {
  testing_support::TempDir dir;
  Reaper reaper;
  const std::string name = PodName("vol", 4);
  const auto [a, a_start] = StartSleeper(reaper);
  const auto [b, b_start] = StartSleeper(reaper);
  WriteRecord(dir.path(), "a.pod", name, 4, a,
              "start_ticks=" + std::to_string(a_start) + "\nstop_timeout_ms=1000\n");
  WriteRecord(dir.path(), "b.pod", name, 4, b,
              "start_ticks=" + std::to_string(b_start) + "\nstop_timeout_ms=20000\n");
  auto runtime = OpenRuntime({.work_dir = dir.path(), .stop_pods_on_exit = false});
  CHECK(runtime->TerminationGrace(name) == milliseconds(2 * 20'000 + 5000));
  runtime->ShutdownLeavingPods();
}

TEST_CASE(
    "local runtime: a runtime that adopts a deleting pod whose share-manager lives sends it "
    "SIGTERM (its last runtime may have died before it could)") {
  testing_support::TempDir dir;
  Reaper reaper;
  const std::pair<pid_t, uint64_t> sleeper = StartSleeper(reaper);
  const pid_t pid = sleeper.first;  // not structured bindings: a lambda captures them
  const uint64_t start = sleeper.second;
  WriteRecord(dir.path(), "x.pod", PodName("vol", 4), 4, pid,
              "start_ticks=" + std::to_string(start) +
                  "\nstate=deleting\ndelete_started_ms=" + std::to_string(SteadyNowMs()) + "\n");
  // SIGKILL only after 30 s: a sleeper gone sooner died of SIGTERM.
  auto runtime = OpenRuntime({.work_dir = dir.path(), .termination_grace = milliseconds(30'000)});
  CHECK(WaitFor([&] { return !base::ProcessAlive(pid, start); }, milliseconds(3000)));
  CHECK(WaitNoPods(*runtime, milliseconds(3000)));
  runtime->Shutdown();
}

TEST_CASE(
    "local runtime: an adopted delete whose grace ran out long ago still sends SIGTERM first, and "
    "SIGKILL only a grace after it") {
  testing_support::TempDir dir;
  Reaper reaper;
  // Lives through SIGTERM, and writes <dir>/term when it gets one (<dir>/term.ready
  // once its trap is set).
  const std::string term = dir.path() + "/term";
  const std::pair<pid_t, uint64_t> live =
      StartChild(reaper, {"sh", "-c",
                          "trap 'echo TERM > \"$0\"' TERM; : > \"$0.ready\"; "
                          "while :; do sleep 0.1; done",
                          term.c_str()});
  REQUIRE(WaitFor([&] { return std::filesystem::exists(term + ".ready"); }, milliseconds(5000)));
  WriteRecord(dir.path(), PodName("vol", 4) + ".pod", PodName("vol", 4), 4, live.first,
              "start_ticks=" + std::to_string(live.second) +
                  "\nstate=deleting\ndelete_started_ms=" + std::to_string(SteadyNowMs() - 600'000) +
                  "\n");
  const auto opened = Clock::now();
  auto runtime = OpenRuntime({.work_dir = dir.path(), .termination_grace = milliseconds(1500)});
  CHECK(WaitFor([&] { return std::filesystem::exists(term); }, milliseconds(1000)));
  CHECK(base::ProcessAlive(live.first, live.second));
  CHECK(WaitNoPods(*runtime, milliseconds(10'000)));
  CHECK_FALSE(base::ProcessAlive(live.first, live.second));
  CHECK(Clock::now() - opened >= milliseconds(1500));
  runtime->Shutdown();
}

TEST_CASE(
    "local runtime: a failing record rewrite is logged once, then at most every 30 s, and its "
    "recovery once") {
  testing_support::TempDir dir;
  LogCapture log;  // outlives the runtime
  Reaper reaper;
  std::atomic<bool> failing{false};
  std::atomic<int> failed{0};
  LocalPodRuntimeOptions options{.share_manager_binary = FakeShareManager(dir.path()),
                                 .work_dir = dir.path(),
                                 .termination_grace = milliseconds(300)};
  options.write_record = [&](const std::string& path, const std::string& text,
                             base::Durability durability) {
    if (failing) {
      ++failed;
      return absl::UnavailableError("disk full");
    }
    return base::WriteFileAtomically(path, text, 0644, durability);
  };
  auto runtime = OpenRuntime(options);
  const Pod pod = CreateWithGanesha(*runtime, dir.path(), reaper);

  // The stand-in's children come and go: its record is rewritten, and
  // tried again on every monitor pass (100 ms) while that fails.
  failing = true;
  REQUIRE(WaitFor([&] { return failed >= 5; }, milliseconds(5000)));
  CHECK(log.Count(pod.name + ": cannot update its record") == 1);
  failing = false;
  CHECK(WaitFor([&] { return log.Count(pod.name + ": its record is written again") == 1; },
                milliseconds(3000)));
  CHECK(log.Count(pod.name + ": cannot update its record") == 1);
  REQUIRE(runtime->Delete(pod.name).ok());
  CHECK(WaitNoPods(*runtime, milliseconds(5000)));
  runtime->Shutdown();
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
