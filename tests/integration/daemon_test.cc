// share-manager daemon end to end: a real ganesha.nfsd on 127.0.0.1, a real
// NFS client (libnfs), real signals. Ports are picked free per test.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/proc.h"
#include "base/unique_fd.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/support/daemon_process.h"
#include "tests/support/nfs_client.h"
#include "tests/support/pid_file.h"
#include "tests/support/program_process.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_for.h"

namespace {

namespace v1 = sharemanager::v1;
using std::chrono::milliseconds;
using testing_support::DaemonProcess;
using testing_support::DaemonSpec;
using testing_support::KillPid;
using testing_support::ProgramProcess;
using testing_support::ReadOnce;
using testing_support::RequireOk;
using testing_support::RunCommand;
using testing_support::ShareManagerBinary;
using testing_support::WaitFor;
using Clock = std::chrono::steady_clock;

std::unique_ptr<DaemonProcess> StartDaemon(DaemonSpec spec = {}) {
  auto d = DaemonProcess::Start(std::move(spec));
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  return std::move(*d);
}

std::string ReadLocal(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool WaitGone(pid_t pid, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (KillPid(pid, 0) != 0) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  return false;
}

// The parent pid and state letter from /proc/<pid>/stat; {0, 0} once it is gone.
std::pair<pid_t, char> ParentAndState(pid_t pid) {
  const auto stat = base::ReadProcStat(pid);
  if (!stat) return {0, 0};
  return {stat->ppid, stat->state};
}

// Gone, or a zombie: nothing runs any more.
bool Dead(pid_t pid) {
  const char state = ParentAndState(pid).second;
  return state == 0 || state == 'Z';
}

std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (ParentAndState(pid).first == parent) out.push_back(pid);
  }
  return out;
}

using Health = grpc::health::v1::HealthCheckResponse;

// A grpc.health.v1 Watch on one of the daemon's health services (20 s at most).
class HealthWatch {
 public:
  HealthWatch(const DaemonProcess& d, const std::string& service)
      : stub_(grpc::health::v1::Health::NewStub(
            grpc::CreateChannel(d.addr(), grpc::InsecureChannelCredentials()))) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    stream_ = stub_->Watch(&context_, request);
  }
  ~HealthWatch() { context_.TryCancel(); }

  // The next status pushed; the test fails when the stream ends instead.
  Health::ServingStatus Next() {
    Health response;
    REQUIRE(stream_->Read(&response));
    return response.status();
  }
  // Whether another message comes before the stream ends.
  bool More() {
    Health response;
    return stream_->Read(&response);
  }

 private:
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<Health>> stream_;
};

}  // namespace

TEST_CASE("1. SERVING: a file written through NFS reads back through NFS and lands in the export") {
  auto d = StartDaemon();
  const auto status = d->Status();
  REQUIRE(status.ok());
  CHECK(status->state() == v1::SERVING);
  CHECK(status->ganesha_pid() > 0);
  CHECK(status->exported());
  CHECK(status->volume() == "pvc-test");
  CHECK(status->nfs_port() == d->nfs_port());
  CHECK(RequireOk(d->HealthServing("")));
  CHECK(RequireOk(d->HealthServing("readiness")));
  CHECK(RequireOk(d->HealthServing("liveness")));

  const std::string data = std::string(10'000, 'x') + "end";  // several NFS write chunks
  const auto written = d->WriteEventually("/hello.txt", data);
  REQUIRE_MESSAGE(written.ok(), written.ToString());
  const auto back = d->ReadEventually("/hello.txt");
  REQUIRE_MESSAGE(back.ok(), back.status().ToString());
  CHECK(*back == data);
  CHECK(ReadLocal(d->export_dir() + "/hello.txt") == data);
}

TEST_CASE("2. SIGKILL ganesha: restarted in place with a new pid, data intact, writes resume") {
  auto d = StartDaemon();
  REQUIRE(d->WriteEventually("/before.txt", "before").ok());
  const auto serving = d->Status();
  REQUIRE(serving.ok());
  const pid_t old_pid = serving->ganesha_pid();
  REQUIRE(KillPid(old_pid, SIGKILL) == 0);

  const auto left = d->WaitFor([&](const v1::ShareStatus& s) { return s.restart_count() >= 1; },
                               milliseconds(5000), "a restart");
  REQUIRE_MESSAGE(left.ok(), left.status().ToString());
  CHECK(left->last_exit().present());
  CHECK(left->last_exit().signal() == SIGKILL);
  const auto again = d->WaitServing();
  REQUIRE_MESSAGE(again.ok(), again.status().ToString());
  CHECK(again->ganesha_pid() != old_pid);
  CHECK(again->ganesha_pid() > 0);
  CHECK(again->restart_count() == 1);
  CHECK(WaitGone(old_pid, milliseconds(2000)));

  const auto before = d->ReadEventually("/before.txt");
  REQUIRE_MESSAGE(before.ok(), before.status().ToString());
  CHECK(*before == "before");
  CHECK(d->WriteEventually("/after.txt", "after").ok());
  CHECK(ReadLocal(d->export_dir() + "/after.txt") == "after");
}

TEST_CASE("2b. in NFS grace after a restart, readiness stays SERVING so clients can reclaim") {
  auto d = StartDaemon({.extra_flags = {"--grace-period", "5", "--lease-lifetime", "5"}});
  // A client that opened a file leaves a record in the recovery dir; after a
  // crash ganesha waits the whole grace period for it to reclaim.
  REQUIRE(d->WriteEventually("/held.txt", "held").ok());
  REQUIRE(KillPid(RequireOk(d->Status()).ganesha_pid(), SIGKILL) == 0);
  REQUIRE(d->WaitFor([](const v1::ShareStatus& s) { return s.restart_count() >= 1; },
                     milliseconds(5000), "a restart")
              .ok());
  const auto again = d->WaitServing();
  REQUIRE_MESSAGE(again.ok(), again.status().ToString());

  const auto refused = testing_support::WriteOnce("127.0.0.1", d->nfs_port(), d->pseudo_path(),
                                                  "/in-grace.txt", "new state");
  const auto ready = d->HealthServing("readiness");
  CHECK_MESSAGE(!refused.ok(), "expected NFS4ERR_GRACE right after the restart");
  CHECK(refused.ToString().find("GRACE") != std::string::npos);
  REQUIRE(ready.ok());
  CHECK(*ready);  // in grace, yet ready: the Service keeps routing clients here
  const auto read = d->ReadEventually("/held.txt");
  REQUIRE(read.ok());
  CHECK(*read == "held");
  CHECK(d->WriteEventually("/in-grace.txt", "after grace", milliseconds(20'000)).ok());
}

TEST_CASE(
    "3. SIGSTOP ganesha: the hang is detected by NULL probes, ganesha is killed and restarted") {
  auto d = StartDaemon({.extra_flags = {"--probe-interval", "200ms", "--probe-failures", "3"}});
  const pid_t old_pid = RequireOk(d->Status()).ganesha_pid();
  REQUIRE(KillPid(old_pid, SIGSTOP) == 0);
  const auto restarted = d->WaitFor(
      [&](const v1::ShareStatus& s) {
        return s.state() == v1::SERVING && s.ganesha_pid() != old_pid;
      },
      milliseconds(10'000), "SERVING with a new ganesha");
  REQUIRE_MESSAGE(restarted.ok(), restarted.status().ToString(), "\n", d->output());
  CHECK(restarted->last_exit().signal() == SIGKILL);
  CHECK(restarted->last_exit().description().find("hung") != std::string::npos);
  CHECK(WaitGone(old_pid, milliseconds(2000)));
  CHECK(d->WriteEventually("/after-hang.txt", "ok").ok());
}

TEST_CASE("4. beyond the death budget: FAILED, health NOT_SERVING, exit code 3") {
  auto d = StartDaemon({.extra_flags = {"--max-deaths", "1", "--failed-linger", "2s"}});
  for (int kills = 0; kills < 2; ++kills) {
    const auto s = d->WaitServing();
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    REQUIRE(KillPid(s->ganesha_pid(), SIGKILL) == 0);
    REQUIRE(
        d->WaitFor([&](const v1::ShareStatus& st) { return st.ganesha_pid() != s->ganesha_pid(); },
                   milliseconds(5000), "ganesha to be reaped")
            .ok());
  }
  const auto failed = d->WaitFor([](const v1::ShareStatus& s) { return s.state() == v1::FAILED; },
                                 milliseconds(5000), "FAILED");
  REQUIRE_MESSAGE(failed.ok(), failed.status().ToString());
  CHECK(failed->reason().find("giving up") != std::string::npos);
  // The final status stays readable during the linger, and health says so.
  CHECK_FALSE(RequireOk(d->HealthServing("")));
  CHECK_FALSE(RequireOk(d->HealthServing("liveness")));
  const auto code = d->WaitExit(milliseconds(10'000));
  REQUIRE(code.ok());
  CHECK(*code == 3);
  CHECK(d->output().find("exiting with code 3") != std::string::npos);
}

TEST_CASE(
    "5. a frozen share-manager: client commands fail within their timeout with exit code 2, never "
    "hang") {
  auto d = StartDaemon();
  d->Signal(SIGSTOP);
  for (const char* cmd : {"status", "probe", "mount"}) {
    CAPTURE(cmd);
    const auto result =
        RunCommand({ShareManagerBinary(), cmd, "--addr", d->addr(), "--timeout", "1s"});
    // docs/REFERENCE.md "Exit codes": 2 = could not connect within --timeout. The
    // kernel completes the TCP handshake for the frozen process; gRPC's never happens.
    CHECK(result.exit_code == 2);
    // Bounded: the 1 s deadline plus process start-up, with a wide margin for a noisy machine.
    CHECK(result.elapsed < milliseconds(5000));
    CHECK(result.output.find("share-manager:") != std::string::npos);
  }
  d->Signal(SIGCONT);
  CHECK(d->WaitServing().ok());
}

TEST_CASE(
    "6. SIGTERM: readiness turns NOT_SERVING, ganesha is stopped and reaped, no process or zombie "
    "is left, exit 0") {
  // Whatever share-manager leaves behind when it exits (a ganesha, an unreaped
  // zombie) is re-parented to this process, where it can be seen.
  REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  auto d = StartDaemon();
  const pid_t ganesha = RequireOk(d->Status()).ganesha_pid();
  REQUIRE(ganesha > 0);
  const uint64_t ganesha_start = RequireOk(base::ReadProcStat(ganesha)).start_ticks;

  HealthWatch readiness(*d, "readiness");
  CHECK(readiness.Next() == Health::SERVING);
  d->Signal(SIGTERM);
  CHECK(readiness.Next() == Health::NOT_SERVING);

  const auto code = d->WaitExit(milliseconds(10'000));
  REQUIRE(code.ok());
  CHECK(*code == 0);
  CHECK(d->output().find("state SERVING -> STOPPING: received SIGTERM") != std::string::npos);
  CHECK_FALSE(base::ProcessAlive(ganesha, ganesha_start));
  // Re-parenting is done before the exit is reported: anything left is here now.
  CHECK(ChildrenOf(getpid()).empty());
  siginfo_t info{};
  const int waitable = waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT);
  CHECK_MESSAGE((waitable != 0 || info.si_pid == 0), "left behind: pid ", info.si_pid);
}

TEST_CASE("6b. SIGKILL share-manager: ganesha dies with it (PR_SET_PDEATHSIG)") {
  auto d = StartDaemon();
  const pid_t ganesha = d->Status()->ganesha_pid();
  REQUIRE(ganesha > 0);
  d->Signal(SIGKILL);
  REQUIRE(d->WaitExit(milliseconds(5000)).ok());
  CHECK(testing_support::WaitFor([&] { return Dead(ganesha); }, milliseconds(5000)));
}

TEST_CASE("6c. ganesha's orphans are re-parented to share-manager, which reaps them") {
  testing_support::TempDir dir("sharemgr-orphan");
  // ganesha, started through a script that leaves an orphan behind first.
  const std::string wrapper = dir.path() + "/ganesha-leaving-an-orphan";
  const std::string pid_file = dir.path() + "/orphan.pid";
  {
    std::ofstream out(wrapper);
    out << "#!/bin/sh\n"
        << "(sleep 60 </dev/null >/dev/null 2>&1 & " << testing_support::ShellWriteLastPid(pid_file)
        << ")\n"
        << "exec ganesha.nfsd \"$@\"\n";
  }
  std::filesystem::permissions(wrapper, std::filesystem::perms::owner_all);
  auto d = StartDaemon({.extra_flags = {"--ganesha-bin", wrapper}});
  const pid_t orphan = testing_support::WaitPidFile(pid_file, milliseconds(5000));
  REQUIRE(orphan > 0);
  // Killed at the end through a pidfd, which a reused pid cannot fool.
  const base::UniqueFd orphan_fd(static_cast<int>(syscall(SYS_pidfd_open, orphan, 0)));
  REQUIRE(orphan_fd);
  struct KillAtEnd {
    int pidfd;
    ~KillAtEnd() { syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0); }
  } kill_at_end{orphan_fd.get()};
  CHECK(testing_support::WaitFor([&] { return ParentAndState(orphan).first == d->pid(); },
                                 milliseconds(5000)));
  REQUIRE(syscall(SYS_pidfd_send_signal, orphan_fd.get(), SIGKILL, nullptr, 0) == 0);
  // Reaped: not even a zombie is left.
  CHECK(testing_support::WaitFor([&] { return ParentAndState(orphan).second == 0; },
                                 milliseconds(5000)));
}

TEST_CASE("7. WatchStatus streams the crash transitions in order, each message different") {
  auto d = StartDaemon();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = d->Stub()->WatchStatus(&context, v1::WatchStatusRequest());
  v1::ShareStatus first;
  REQUIRE(stream->Read(&first));
  CHECK(first.state() == v1::SERVING);
  REQUIRE(KillPid(first.ganesha_pid(), SIGKILL) == 0);

  std::vector<v1::ShareStatus> seen{first};
  v1::ShareStatus next;
  while (stream->Read(&next)) {
    seen.push_back(next);
    if (next.state() == v1::SERVING) break;
  }
  context.TryCancel();
  REQUIRE(seen.size() >= 3);
  CHECK(seen[1].state() == v1::DEGRADED);
  CHECK(seen[1].reason().find("killed by signal 9") != std::string::npos);
  CHECK(seen.back().state() == v1::SERVING);
  CHECK(seen.back().ganesha_pid() != first.ganesha_pid());
  for (size_t i = 1; i < seen.size(); ++i) {
    CAPTURE(i);
    CHECK(seen[i].version() > seen[i - 1].version());
    // No periodic repeats: every message differs in something besides version and uptimes.
    v1::ShareStatus a = seen[i - 1], b = seen[i];
    for (auto* s : {&a, &b}) {
      s->clear_version();
      s->clear_uptime_ms();
      s->clear_ganesha_uptime_ms();
    }
    CHECK(a.SerializeAsString() != b.SerializeAsString());
  }
}

TEST_CASE(
    "Unmount withdraws the export while ganesha keeps running and Mount brings it back by "
    "generation") {
  auto d = StartDaemon({.extra_flags = {"--epoch", "7"}});
  REQUIRE(d->WriteEventually("/kept.txt", "kept").ok());
  const pid_t ganesha = RequireOk(d->Status()).ganesha_pid();
  auto stub = d->Stub();
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    v1::UnmountRequest req;
    req.set_epoch(7);
    v1::UnmountResponse resp;
    REQUIRE(stub->Unmount(&ctx, req, &resp).ok());
    CHECK_FALSE(resp.status().exported());
  }
  const auto down = d->WaitFor([](const v1::ShareStatus& s) { return s.state() == v1::DEGRADED; },
                               milliseconds(5000), "DEGRADED after Unmount");
  REQUIRE(down.ok());
  CHECK(down->ganesha_pid() == ganesha);
  CHECK_FALSE(RequireOk(d->HealthServing("readiness")));
  CHECK(RequireOk(d->HealthServing("liveness")));  // a restart would not help: stay live
  // ganesha rereads its exports on SIGHUP: the file goes out of reach.
  CHECK(WaitFor(
      [&] { return !ReadOnce("127.0.0.1", d->nfs_port(), d->pseudo_path(), "/kept.txt").ok(); },
      milliseconds(5000)));

  auto mount = [&](uint64_t epoch, uint64_t generation) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    v1::MountRequest req;
    req.set_epoch(epoch);
    req.set_generation(generation);
    v1::MountResponse resp;
    const auto status = stub->Mount(&ctx, req, &resp);
    return std::pair{status, resp};
  };
  auto [stale, ignored] = mount(6, 1);
  CHECK(stale.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(stale.error_message().find("stale epoch") != std::string::npos);

  auto [ok, resp] = mount(7, 3);
  REQUIRE_MESSAGE(ok.ok(), ok.error_message());
  CHECK(resp.handled_generation() == 3);
  REQUIRE(d->WaitServing().ok());
  const auto kept = d->ReadEventually("/kept.txt");
  REQUIRE_MESSAGE(kept.ok(), kept.status().ToString());
  CHECK(*kept == "kept");

  auto [again, same] = mount(7, 3);  // already handled: a no-op
  REQUIRE(again.ok());
  CHECK(same.handled_generation() == 3);
  auto [more, next] = mount(7, 0);  // "one more"
  REQUIRE(more.ok());
  CHECK(next.handled_generation() == 4);
  CHECK(RequireOk(d->Status()).remount_generation() == 4);
  CHECK(RequireOk(d->Status()).ganesha_pid() == ganesha);
}

TEST_CASE("bad flags: one clear line, exit code 2, nothing started") {
  struct Case {
    std::vector<std::string> args;
    const char* expect;
  };
  const Case cases[] = {
      {{"--volume", "Bad_Name"}, "--volume"},
      {{"--volume", "pvc-1", "--export-dir", "/x\"}"}, "--export-dir"},
      {{"--volume", "pvc-1", "--export-dir", "/a/../b"}, "--export-dir"},
      {{"--volume", "pvc-1", "--grace-period", "10", "--lease-lifetime", "60"}, "--grace-period"},
      {{"--volume", "pvc-1", "--probe-interval", "fast"}, "--probe-interval"},
      {{"--volume", "pvc-1", "--nfs-port", "notaport"}, "--nfs-port"},
      // Longhorn's calls carry no epoch: beside a fence only when acknowledged.
      {{"--volume", "pvc-1", "--epoch", "3", "--longhorn-compat"},
       "add --longhorn-compat-bypasses-epoch"},
      {{"--volume", "pvc-1", "--nfs-clients", "0x7f.1"}, "--nfs-clients"},
      {{"--volume", "pvc-1", "--nfs-clients", "localhost"}, "covers loopback"},
      {{}, "--volume"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {ShareManagerBinary(), "daemon", "--state-dir",
                                     "/tmp/sharemgr-never-created"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    CAPTURE(c.expect);
    const auto result = RunCommand(argv);
    CHECK(result.exit_code == 2);
    CHECK(result.output.find(c.expect) != std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists("/tmp/sharemgr-never-created"));
}

TEST_CASE("client commands: status --json, probe exit codes, unreachable server") {
  auto d = StartDaemon();
  const auto json = RunCommand({ShareManagerBinary(), "status", "--json", "--addr", d->addr()});
  CHECK(json.exit_code == 0);
  CHECK(json.output.find("\"state\":\"SERVING\"") != std::string::npos);
  CHECK(RunCommand({ShareManagerBinary(), "probe", "--addr", d->addr()}).exit_code == 0);
  CHECK(RunCommand({ShareManagerBinary(), "probe", "--addr", d->addr(), "--service", "liveness"})
            .exit_code == 0);
  const auto unknown =
      RunCommand({ShareManagerBinary(), "probe", "--addr", d->addr(), "--service", "nope"});
  CHECK(unknown.exit_code == 3);  // NOT_FOUND from the health service: an RPC failure
  const auto closed = base::FreeLoopbackPort();
  const auto refused = RunCommand({ShareManagerBinary(), "status", "--addr",
                                   "127.0.0.1:" + std::to_string(closed), "--timeout", "1s"});
  CHECK(refused.exit_code == 2);
  CHECK(RunCommand({ShareManagerBinary(), "probe", "--bogus"}).exit_code == 1);
  const auto version = RunCommand({ShareManagerBinary(), "--version"});
  CHECK(version.exit_code == 0);
  CHECK(version.output.find("share-manager ") == 0);
}

TEST_CASE("a second share-manager on the same gRPC port refuses to start (exit 4)") {
  auto d = StartDaemon();
  const testing_support::TempDir temp("sharemgr-dup");
  const std::string& dir = temp.path();
  const auto result =
      RunCommand({ShareManagerBinary(), "daemon", "--volume", "pvc-dup", "--export-dir", dir + "/e",
                  "--state-dir", dir + "/s", "--nfs-address", "127.0.0.1", "--nfs-port",
                  std::to_string(base::FreeLoopbackPort()), "--listen", d->addr()},
                 milliseconds(10'000));
  CHECK(result.exit_code == 4);
  CHECK(result.output.find("cannot serve gRPC") != std::string::npos);
}

TEST_CASE("health Watch and the watch command push changes, a unix socket serves the same API") {
  const testing_support::TempDir socket_dir;  // private: the daemon refuses a world-writable one
  const std::string socket = socket_dir.path() + "/sm.sock";
  auto d = StartDaemon({.extra_flags = {"--socket", socket}});
  const auto over_socket = RunCommand({ShareManagerBinary(), "status", "--addr", socket});
  CHECK(over_socket.exit_code == 0);
  CHECK(over_socket.output.find("SERVING") != std::string::npos);

  {
    HealthWatch readiness(*d, "readiness");
    CHECK(readiness.Next() == Health::SERVING);
    REQUIRE(KillPid(RequireOk(d->Status()).ganesha_pid(), SIGKILL) == 0);
    CHECK(readiness.Next() == Health::NOT_SERVING);
    CHECK(readiness.Next() == Health::SERVING);
  }

  // `watch` prints the status now and every change until the server stops, then exits 0.
  ProgramProcess watch({ShareManagerBinary(), "watch", "--addr", d->addr()});
  REQUIRE_MESSAGE(watch.WaitOutput(" SERVING ", milliseconds(10'000)), watch.output());
  d->Signal(SIGTERM);
  const auto watch_exit = watch.WaitExit(milliseconds(15'000));
  REQUIRE_MESSAGE(watch_exit.has_value(), watch.output());
  CHECK(watch_exit->ShellCode() == 0);
  CHECK(watch.output().find(" STOPPING ") != std::string::npos);
  CHECK(RequireOk(d->WaitExit(milliseconds(10'000))) == 0);
  CHECK_FALSE(std::filesystem::exists(socket));  // removed on the way out
}

TEST_CASE(
    "an export ganesha cannot load keeps the share from SERVING, though ganesha answers NULL") {
  // ganesha's VFS cannot export sysfs (no file handles): it starts, answers
  // NULL, and serves nothing. Only the LOOKUP of the pseudo path tells.
  auto d =
      StartDaemon({.extra_flags = {"--export-dir", "/sys/kernel/mm", "--probe-interval", "200ms"},
                   .wait_until_serving = false});
  const auto degraded = d->WaitFor(
      [](const v1::ShareStatus& s) {
        return s.state() == v1::DEGRADED && s.reason().find("does not export") != std::string::npos;
      },
      milliseconds(10'000), "DEGRADED because the export is missing");
  REQUIRE_MESSAGE(degraded.ok(), degraded.status().ToString());
  CHECK(degraded->ganesha_pid() > 0);
  CHECK_FALSE(RequireOk(d->HealthServing("readiness")));
  CHECK(RequireOk(d->HealthServing("liveness")));  // a restart would not fix a bad export
  // A negative wait, the assertion itself: for seven probe intervals, more
  // than the three misses that would make a hang, checked all along, ganesha
  // is not restarted.
  CHECK(testing_support::HoldsFor(
      [&] {
        const auto s = d->Status();
        return s.ok() && s->restart_count() == 0 && s->ganesha_pid() == degraded->ganesha_pid();
      },
      milliseconds(1500)));
}

namespace {

// A daemon started by hand (not through DaemonProcess) for a start that must
// fail: its exit code and output. Directories are given by the caller.
supervisor::ProgramResult RunDaemonUntilExit(const std::string& export_dir,
                                             const std::string& state_dir) {
  return RunCommand({ShareManagerBinary(), "daemon", "--volume", "pvc-unusable", "--export-dir",
                     export_dir, "--state-dir", state_dir, "--nfs-address", "127.0.0.1",
                     "--nfs-port", std::to_string(base::FreeLoopbackPort()), "--listen",
                     "127.0.0.1:" + std::to_string(base::FreeLoopbackPort())},
                    milliseconds(10'000));
}

v1::UnmountResponse CallUnmount(const DaemonProcess& d, uint64_t epoch, grpc::Status* rpc) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::UnmountRequest req;
  req.set_epoch(epoch);
  v1::UnmountResponse resp;
  *rpc = d.Stub()->Unmount(&ctx, req, &resp);
  return resp;
}

}  // namespace

TEST_CASE("an unusable state dir or export dir: exit code 4, saying which, no ganesha started") {
  const testing_support::TempDir temp("sharemgr-unusable");
  // A regular file where the directory should be: valid flags, unusable directory.
  const std::string file = temp.path() + "/a-file";
  std::ofstream(file) << "not a directory";
  SUBCASE("state dir") {
    const auto r = RunDaemonUntilExit(temp.path() + "/export", file);
    CHECK(r.exit_code == 4);
    CHECK_MESSAGE(r.output.find(file + " is not a directory") != std::string::npos, r.output);
    CHECK(r.output.find("started ganesha") == std::string::npos);
  }
  SUBCASE("export dir") {
    const auto r = RunDaemonUntilExit(file, temp.path() + "/state");
    CHECK(r.exit_code == 4);
    CHECK_MESSAGE(r.output.find(file + " is not a directory") != std::string::npos, r.output);
    CHECK(r.output.find("started ganesha") == std::string::npos);
  }
}

TEST_CASE(
    "the unmount command withdraws the export (exit 0), refuses a stale epoch (exit 3), and probe "
    "then exits 4 for readiness, 0 for liveness") {
  auto d = StartDaemon({.extra_flags = {"--epoch", "7"}});
  const pid_t ganesha = RequireOk(d->Status()).ganesha_pid();
  const auto stale = RunCommand(
      {ShareManagerBinary(), "unmount", "--addr", d->addr(), "--epoch", "6", "--timeout", "3s"});
  CHECK(stale.exit_code == 3);
  CHECK_MESSAGE(stale.output.find("stale epoch") != std::string::npos, stale.output);
  CHECK(RequireOk(d->Status()).exported());  // refused: nothing withdrawn

  const auto unmounted = RunCommand({ShareManagerBinary(), "unmount", "--addr", d->addr(),
                                     "--epoch", "7", "--json", "--timeout", "3s"});
  CHECK_MESSAGE(unmounted.exit_code == 0, unmounted.output);
  CHECK_MESSAGE(unmounted.output.find("\"exported\":false") != std::string::npos, unmounted.output);
  const auto status = RequireOk(d->Status());
  CHECK_FALSE(status.exported());
  CHECK(status.state() == v1::DEGRADED);
  CHECK(status.ganesha_pid() == ganesha);  // ganesha keeps running

  // grpc_health_probe's codes: 4 is "the service is NOT_SERVING".
  CHECK(RunCommand({ShareManagerBinary(), "probe", "--addr", d->addr(), "--service", "readiness"})
            .exit_code == 4);
  CHECK(RunCommand({ShareManagerBinary(), "probe", "--addr", d->addr()}).exit_code == 4);
  CHECK(RunCommand({ShareManagerBinary(), "probe", "--addr", d->addr(), "--service", "liveness"})
            .exit_code == 0);
}

TEST_CASE(
    "Unmount is fenced and idempotent: another epoch or none is refused with the export kept, a "
    "second Unmount answers OK and changes nothing") {
  auto d = StartDaemon({.extra_flags = {"--epoch", "3"}});
  grpc::Status rpc;
  CallUnmount(*d, 4, &rpc);
  CHECK(rpc.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(rpc.error_message().find("stale epoch") != std::string::npos);
  CallUnmount(*d, 2, &rpc);
  CHECK(rpc.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(RequireOk(d->Status()).state() == v1::SERVING);
  CHECK(RequireOk(d->Status()).exported());

  const auto first = CallUnmount(*d, 3, &rpc);
  REQUIRE_MESSAGE(rpc.ok(), rpc.error_message());
  CHECK_FALSE(first.status().exported());
  const auto settled =
      d->WaitFor([](const v1::ShareStatus& s) { return s.state() == v1::DEGRADED; },
                 milliseconds(5000), "DEGRADED after Unmount");
  REQUIRE_MESSAGE(settled.ok(), settled.status().ToString());
  CallUnmount(*d, 0, &rpc);  // no epoch: refused by a fenced daemon, export or not
  CHECK(rpc.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  const auto second = CallUnmount(*d, 3, &rpc);
  REQUIRE_MESSAGE(rpc.ok(), rpc.error_message());
  CHECK_FALSE(second.status().exported());
  const auto after = RequireOk(d->Status());
  // Nothing changed: no new status was published, same ganesha, same generation.
  CHECK(after.version() == settled->version());
  CHECK(after.ganesha_pid() == settled->ganesha_pid());
  CHECK(after.remount_generation() == settled->remount_generation());
  CHECK(after.restart_count() == 0);
}

TEST_CASE("WatchStatus: each change is one message whose version is the previous one plus 1") {
  auto d = StartDaemon();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = d->Stub()->WatchStatus(&context, v1::WatchStatusRequest());
  v1::ShareStatus last;
  REQUIRE(stream->Read(&last));
  REQUIRE(last.state() == v1::SERVING);
  auto stub = d->Stub();
  for (int i = 0; i < 5; ++i) {
    CAPTURE(i);
    // One change at a time: "one more" remount generation on a SERVING share.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::MountResponse resp;
    REQUIRE(stub->Mount(&ctx, v1::MountRequest(), &resp).ok());
    v1::ShareStatus next;
    REQUIRE(stream->Read(&next));
    CHECK(next.remount_generation() == last.remount_generation() + 1);
    CHECK(next.version() == last.version() + 1);
    CHECK(next.version() == RequireOk(d->Status()).version());  // and nothing since
    last = next;
  }
  context.TryCancel();
}

TEST_CASE(
    "SIGTERM: a health Watch in flight sees NOT_SERVING at once and is ended within the 1 s drain, "
    "not left open") {
  auto d = StartDaemon();
  HealthWatch readiness(*d, "readiness");  // its own deadline is 20 s away
  REQUIRE(readiness.Next() == Health::SERVING);
  const auto term = Clock::now();
  d->Signal(SIGTERM);
  CHECK(readiness.Next() == Health::NOT_SERVING);
  CHECK(Clock::now() - term < milliseconds(500));
  while (readiness.More()) {
  }
  // A health Watch never ends by itself: the server gave it the whole 1 s
  // drain, then cut it (with room for a busy machine).
  const auto ended = Clock::now() - term;
  CHECK(ended >= milliseconds(900));
  CHECK(ended < milliseconds(2500));
  CHECK(RequireOk(d->WaitExit(milliseconds(10'000))) == 0);
}

TEST_CASE(
    "lines of ganesha's log file reach share-manager's log tagged [ganesha], at the level their "
    "severity maps to") {
  auto d = StartDaemon();
  // ganesha's own lines came through already (it logs its start-up at EVENT).
  CHECK(d->output().find("[ganesha] nfs-ganesha-") != std::string::npos);
  const std::string marker = "forwarding-marker-" + std::to_string(getpid());
  const std::pair<const char*, const char*> severities[] = {
      {"EVENT", "info"}, {"WARN", "warning"}, {"MAJ", "error"}, {"CRIT", "critical"}};
  {
    // Appended the way ganesha writes it: its date, epoch and host first.
    std::ofstream log(d->state_dir() + "/ganesha.log", std::ios::app);
    for (const auto& [severity, level] : severities) {
      log << "30/11/2026 00:00:00 : epoch 1 : host : nfs-ganesha-1[main] test :NFS STARTUP :"
          << severity << " :" << marker << "-" << severity << "\n";
    }
  }
  for (const auto& [severity, level] : severities) {
    CAPTURE(severity);
    const std::string needle = marker + "-" + severity;
    REQUIRE(
        WaitFor([&] { return d->output().find(needle) != std::string::npos; }, milliseconds(5000)));
    const std::string out = d->output();
    const auto at = out.find(needle);
    const auto begin = out.rfind('\n', at) + 1;
    const std::string line = out.substr(begin, out.find('\n', at) - begin);
    CAPTURE(line);
    // "<time> <level> [ganesha] nfs-ganesha-1[main] ...": ganesha's own prefix dropped.
    CHECK(line.find(std::string(" ") + level + " ") != std::string::npos);
    CHECK(line.find("[ganesha] nfs-ganesha-1[main] test :NFS STARTUP :") != std::string::npos);
    CHECK(line.find("epoch 1") == std::string::npos);
  }
}

TEST_CASE(
    "a frozen ganesha (SIGSTOP) whose NULL probes hang: GetStatus and health answer within 500 ms "
    "all along and liveness stays SERVING past the 3 s stall limit") {
  // Probes wait their whole 1 s timeout on a ganesha that accepts and never
  // answers; twenty misses before a kill, so the hang lasts the whole check.
  auto d = StartDaemon({.extra_flags = {"--probe-interval", "1s", "--probe-failures", "20"}});
  const pid_t ganesha = RequireOk(d->Status()).ganesha_pid();
  REQUIRE(ganesha > 0);
  REQUIRE(KillPid(ganesha, SIGSTOP) == 0);
  struct ContinueAtEnd {
    pid_t pid;
    ~ContinueAtEnd() { kill(pid, SIGCONT); }
  } continue_at_end{ganesha};
  REQUIRE(WaitFor([&] { return d->output().find("NFS NULL probe missed") != std::string::npos; },
                  milliseconds(5000)));
  const auto answers = [&] {
    const auto start = Clock::now();
    const auto status = d->Status(milliseconds(500));
    const auto live = d->HealthServing("liveness", milliseconds(500));
    return status.ok() && status->ganesha_pid() == ganesha && live.ok() && *live &&
           Clock::now() - start < milliseconds(1000);
  };
  CHECK_MESSAGE(testing_support::HoldsFor(answers, milliseconds(3500)), d->output());
  CHECK(d->output().find("liveness NOT_SERVING") == std::string::npos);
}
