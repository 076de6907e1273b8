// One owner per volume, end to end: real loop devices, real ganesha, a real
// e2fsck behind a wrapper that can be slowed down and that records every run
// and every signal it got. Repairs, RPCs and stops never fight over the device.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "tests/support/count_occurrences.h"
#include "tests/support/daemon_process.h"
#include "tests/support/loop_device.h"
#include "tests/support/make_loop.h"
#include "tests/support/require_ok.h"
#include "tests/support/slow_fsck.h"
#include "tests/support/volume_probes.h"
#include "tests/support/wait_for.h"

namespace {

namespace v1 = sharemanager::v1;
using std::chrono::milliseconds;
using testing_support::DaemonProcess;
using testing_support::LoopDevice;
using testing_support::MountSourceOf;
using testing_support::RequireOk;
using testing_support::Run;
using testing_support::RunCommand;
using testing_support::SlowFsck;

std::unique_ptr<LoopDevice> MakeExt4() { return testing_support::MakeLoop("ext4"); }

void TriggerExt4Error(const LoopDevice& loop) {
  std::ofstream("/sys/fs/ext4/" + std::filesystem::path(loop.path()).filename().string() +
                "/trigger_fs_error")
      << "test error\n";
}

std::unique_ptr<DaemonProcess> Start(const LoopDevice& loop, std::vector<std::string> extra = {},
                                     bool wait_until_serving = true) {
  std::vector<std::string> flags = {
      "--device", loop.path(), "--fs", "ext4", "--volume-probe-interval", "200ms"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  auto d = DaemonProcess::Start({.extra_flags = flags, .wait_until_serving = wait_until_serving});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  return std::move(*d);
}

grpc::Status CallMount(const DaemonProcess& d) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::MountResponse resp;
  return d.Stub()->Mount(&ctx, v1::MountRequest(), &resp);
}

grpc::Status CallUnmount(const DaemonProcess& d) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::UnmountResponse resp;
  return d.Stub()->Unmount(&ctx, v1::UnmountRequest(), &resp);
}

grpc::Status CallTrim(const DaemonProcess& d, milliseconds deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  v1::FilesystemTrimResponse resp;
  return d.Stub()->FilesystemTrim(&ctx, v1::FilesystemTrimRequest(), &resp);
}

absl::StatusOr<v1::ShareStatus> WaitRepairing(DaemonProcess& d) {
  return d.WaitFor(
      [](const v1::ShareStatus& s) { return s.volume_state() == v1::VOLUME_REPAIRING; },
      milliseconds(15'000), "VOLUME_REPAIRING");
}

// The real e2fsck -fn: exit 0 means the filesystem is consistent.
int CheckReadOnly(const LoopDevice& loop) {
  return RunCommand({"/usr/sbin/e2fsck", "-fn", loop.path()}).exit_code;  // not the wrapper
}

}  // namespace

TEST_CASE("owner 1. a slow repair is reported as a repair, RPCs are refused, not run beside it") {
  SlowFsck fsck;
  auto loop = MakeExt4();
  auto d = Start(*loop);
  REQUIRE(d->WriteEventually("/precious.txt", "kept").ok());
  const int started_checks = fsck.Count("start");
  fsck.Slow(true);
  TriggerExt4Error(*loop);
  auto repairing = WaitRepairing(*d);
  REQUIRE_MESSAGE(repairing.ok(), repairing.status().ToString(), "\n", d->output());
  REQUIRE(fsck.WaitCount("start", started_checks + 1, milliseconds(10'000)));

  // The contract: what, since when, the budget; readiness off, liveness on.
  auto status = d->Status();
  REQUIRE(status.ok());
  CHECK(status->state() == v1::DEGRADED);
  REQUIRE(status->has_repair());
  CHECK(status->repair().what().find("checking the filesystem") != std::string::npos);
  CHECK(status->repair().started_unix_ms() > 0);
  CHECK(status->repair().full_repairs_in_window() == 1);
  CHECK(status->repair().max_full_repairs() == 3);
  // The repair's elapsed time keeps counting while it runs.
  const auto later = d->WaitFor(
      [&](const v1::ShareStatus& s) {
        return s.repair().elapsed_ms() > status->repair().elapsed_ms();
      },
      milliseconds(5000), "the repair's elapsed time to grow");
  REQUIRE_MESSAGE(later.ok(), later.status().ToString());
  CHECK(later->has_repair());
  CHECK(RequireOk(d->HealthServing("liveness")) == true);
  CHECK(RequireOk(d->HealthServing("readiness")) == false);

  // Nothing that touches the device runs beside the check: refused at once.
  const auto mount = CallMount(*d);
  CHECK(mount.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(mount.error_message().find("repairing the filesystem") != std::string::npos);
  const auto unmount = CallUnmount(*d);
  CHECK(unmount.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(MountSourceOf(d->export_dir()).empty());  // unmounted for the check, by the repair only

  fsck.Slow(false);
  auto serving = d->WaitServing(milliseconds(30'000));
  REQUIRE_MESSAGE(serving.ok(), serving.status().ToString(), "\n", d->output());
  CHECK_FALSE(serving->has_repair());
  CHECK(serving->volume_state() == v1::VOLUME_MOUNTED);
  CHECK(fsck.Count("TERM") == 0);
  const auto data = d->ReadEventually("/precious.txt");
  REQUIRE_MESSAGE(data.ok(), data.status().ToString());
  CHECK(*data == "kept");
}

TEST_CASE("owner 2. Unmount during a repair is refused, once it ends Unmount holds for good") {
  SlowFsck fsck;
  auto loop = MakeExt4();
  auto d = Start(*loop);
  fsck.Slow(true);
  TriggerExt4Error(*loop);
  {
    const auto repairing = WaitRepairing(*d);
    REQUIRE_MESSAGE(repairing.ok(), repairing.status().ToString(), "\n", d->output());
  }
  CHECK(CallUnmount(*d).error_code() == grpc::StatusCode::UNAVAILABLE);
  fsck.Slow(false);
  // The caller retries after the repair, as a controller does.
  grpc::Status unmounted = CallUnmount(*d);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!unmounted.ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(100));
    unmounted = CallUnmount(*d);
  }
  REQUIRE_MESSAGE(unmounted.ok(), unmounted.error_message(), "\n", d->output());
  CHECK(MountSourceOf(d->export_dir()).empty());
  // A negative wait, the assertion itself: for five probe intervals, checked
  // all along, nothing mounts it again.
  CHECK_MESSAGE(testing_support::HoldsFor([&] { return MountSourceOf(d->export_dir()).empty(); },
                                          milliseconds(1000)),
                d->output());
  auto status = d->Status();
  REQUIRE(status.ok());
  CHECK(status->volume_state() == v1::VOLUME_RELEASED);
}

TEST_CASE("owner 3. Mount during start-up preparation gets a clear answer, no crash") {
  SlowFsck fsck;
  fsck.Slow(true);
  auto loop = MakeExt4();
  auto d = Start(*loop, {}, false);
  REQUIRE(fsck.WaitCount("start", 1, milliseconds(10'000)));
  auto preparing =
      d->WaitFor([](const v1::ShareStatus& s) { return s.volume_state() == v1::VOLUME_PREPARING; },
                 milliseconds(5000), "VOLUME_PREPARING");
  REQUIRE_MESSAGE(preparing.ok(), preparing.status().ToString());
  CHECK(preparing->state() == v1::STARTING);
  CHECK(preparing->has_repair());  // the start-up check is reported like a repair
  const auto mount = CallMount(*d);
  CHECK(mount.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(mount.error_message().find("still being prepared") != std::string::npos);
  CHECK(CallUnmount(*d).error_code() == grpc::StatusCode::UNAVAILABLE);
  fsck.Slow(false);
  REQUIRE(d->WaitServing(milliseconds(30'000)).ok());
  CHECK(CallMount(*d).ok());
  CHECK_FALSE(d->exited());
}

TEST_CASE("owner 4. SIGTERM during the start-up check: e2fsck gets SIGTERM, never SIGKILL") {
  SlowFsck fsck;
  fsck.Slow(true);
  auto loop = MakeExt4();
  auto d = Start(*loop, {}, false);
  REQUIRE(fsck.WaitCount("start", 1, milliseconds(10'000)));
  d->Signal(SIGTERM);
  const auto code = d->WaitExit(milliseconds(20'000));
  REQUIRE(code.ok());
  CHECK(*code == 0);  // an orderly stop, not a volume failure
  CHECK_MESSAGE(fsck.Count("TERM") == 1, fsck.log(), "\n", d->output());
  CHECK(MountSourceOf(d->export_dir()).empty());
  CHECK(CheckReadOnly(*loop) == 0);
}

TEST_CASE(
    "owner 5. SIGTERM during a repair: the check is stopped cleanly, the next start is clean") {
  SlowFsck fsck;
  auto loop = MakeExt4();
  auto d = Start(*loop);
  REQUIRE(d->WriteEventually("/precious.txt", "kept").ok());
  fsck.Slow(true);
  TriggerExt4Error(*loop);
  {
    const auto repairing = WaitRepairing(*d);
    REQUIRE_MESSAGE(repairing.ok(), repairing.status().ToString(), "\n", d->output());
  }
  REQUIRE(fsck.WaitCount("start", 2, milliseconds(10'000)));  // the start-up check, then this
  d->Signal(SIGTERM);
  const auto code = d->WaitExit(milliseconds(20'000));
  REQUIRE(code.ok());
  CHECK(*code == 0);
  CHECK_MESSAGE(fsck.Count("TERM") == 1, fsck.log(), "\n", d->output());
  CHECK(MountSourceOf(d->export_dir()).empty());
  // What the next start does with the interrupted check: preen it clean.
  fsck.Slow(false);
  auto next = Start(*loop);
  const auto data = next->ReadEventually("/precious.txt");
  REQUIRE_MESSAGE(data.ok(), data.status().ToString());
  CHECK(*data == "kept");
  next->Signal(SIGTERM);
  REQUIRE(next->WaitExit(milliseconds(20'000)).ok());
  CHECK(CheckReadOnly(*loop) == 0);
}

TEST_CASE("owner 6. the repair budget: repeated filesystem errors end in FAILED, exit 5") {
  SlowFsck fsck;
  auto loop = MakeExt4();
  auto d = Start(*loop, {"--max-repairs", "2", "--repair-window", "10m"});
  for (int repair = 1; repair <= 2; ++repair) {
    const auto current = d->Status();
    REQUIRE(current.ok());
    const uint64_t before = current->remount_generation();
    TriggerExt4Error(*loop);
    auto repaired = d->WaitFor(
        [&](const v1::ShareStatus& s) {
          return s.state() == v1::SERVING && s.remount_generation() > before;
        },
        milliseconds(30'000), "repaired");
    REQUIRE_MESSAGE(repaired.ok(), repaired.status().ToString(), "\n", d->output());
  }
  const int checks = fsck.Count("start");
  TriggerExt4Error(*loop);
  auto failed = d->WaitFor([](const v1::ShareStatus& s) { return s.state() == v1::FAILED; },
                           milliseconds(30'000), "FAILED");
  REQUIRE_MESSAGE(failed.ok(), failed.status().ToString(), "\n", d->output());
  CHECK(failed->reason().find("--max-repairs") != std::string::npos);
  const auto code = d->WaitExit(milliseconds(20'000));
  REQUIRE(code.ok());
  CHECK(*code == 5);
  CHECK(fsck.Count("start") == checks);  // the third error got no check
  CHECK(MountSourceOf(d->export_dir()).empty());
}

TEST_CASE("owner 7. --export-dir spelled with a trailing or doubled slash serves normally") {
  auto loop = MakeExt4();
  for (const std::string suffix : {"/", "//"}) {
    CAPTURE(suffix);
    auto d = DaemonProcess::Start(
        {.extra_flags = {"--device", loop->path(), "--fs", "ext4", "--volume-probe-interval",
                         "200ms"},
         .spell_export_dir = [&](const std::string& dir) { return dir + suffix; }});
    REQUIRE_MESSAGE(d.ok(), d.status().ToString());
    CHECK((*d)->WriteEventually("/slash.txt", "ok").ok());
    // Three volume probes later (seen, not slept for): no repair loop.
    REQUIRE_MESSAGE(testing_support::WaitVolumeProbes(**d, 3), (*d)->output());
    auto status = (*d)->Status();
    REQUIRE(status.ok());
    CHECK(status->state() == v1::SERVING);
    CHECK(status->remount_generation() == 0);
    CHECK(status->export_path() == (*d)->export_dir());
    (*d)->Signal(SIGTERM);
    REQUIRE((*d)->WaitExit(milliseconds(20'000)).ok());
  }
}

TEST_CASE("owner 8. Mount leaves the volume root's permissions alone") {
  auto loop = MakeExt4();
  auto d = Start(*loop);
  REQUIRE(chmod(d->export_dir().c_str(), 0777) == 0);
  REQUIRE(CallUnmount(*d).ok());
  REQUIRE(CallMount(*d).ok());
  REQUIRE(d->WaitServing().ok());
  REQUIRE(CallMount(*d).ok());  // a remount request on a mounted volume too
  struct stat st {};
  REQUIRE(stat(d->export_dir().c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0777);
}

TEST_CASE(
    "owner 9. a trim queued behind a running resize gets DEADLINE_EXCEEDED at its caller's "
    "deadline and is dropped, never run") {
  testing_support::SlowTool resize2fs("resize2fs", "/usr/sbin/resize2fs");
  auto loop = MakeExt4();
  auto d = Start(*loop);
  resize2fs.Slow(true);
  auto resize = std::async(std::launch::async, [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::FilesystemResizeResponse response;
    return d->Stub()->FilesystemResize(&ctx, v1::FilesystemResizeRequest(), &response);
  });
  REQUIRE(resize2fs.WaitCount("start", 1, milliseconds(10'000)));

  const auto start = std::chrono::steady_clock::now();
  const auto trim = CallTrim(*d, milliseconds(1000));
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(trim.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK(took >= milliseconds(900));
  CHECK(took < milliseconds(3000));

  // The server's copy of the deadline ends a little after the client's (it
  // travels as a timeout): the resize goes on well past both, held by the
  // slow resize2fs, before it lets the trim's turn come.
  CHECK(testing_support::HoldsFor(
      [&] { return resize.wait_for(std::chrono::seconds(0)) == std::future_status::timeout; },
      milliseconds(300)));
  resize2fs.Slow(false);
  REQUIRE(resize.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  const auto resized = resize.get();
  CHECK_MESSAGE(resized.ok(), resized.error_message());  // nothing to grow: a no-op
  CHECK(testing_support::CountOccurrences(d->output(), "volume: resize starts") == 1);
  // The owner is not wedged: a trim with time to wait runs.
  const auto again = CallTrim(*d, milliseconds(30'000));
  CHECK_MESSAGE(again.ok(), again.error_message());
  REQUIRE(testing_support::WaitFor(
      [&] { return testing_support::CountOccurrences(d->output(), "volume: trim starts") >= 1; },
      milliseconds(5000)));
  // Only that one ran: the first trim's turn came after its deadline and it
  // was dropped, not run late.
  CHECK_MESSAGE(testing_support::CountOccurrences(d->output(), "volume: trim starts") == 1,
                d->output());
}

TEST_CASE(
    "owner 10. Unmount of a busy volume is retried while a file is held open there, and "
    "succeeds once it is closed") {
  auto loop = MakeExt4();
  auto d = Start(*loop);
  int held = open((d->export_dir() + "/held.txt").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  REQUIRE(held >= 0);
  struct CloseAtEnd {
    int& fd;
    ~CloseAtEnd() {
      if (fd >= 0) close(fd);
    }
  } close_at_end{held};
  auto unmount = std::async(std::launch::async, [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::UnmountResponse response;
    return d->Stub()->Unmount(&ctx, v1::UnmountRequest(), &response);
  });
  REQUIRE_MESSAGE(testing_support::WaitFor(
                      [&] {
                        return testing_support::CountOccurrences(d->output(),
                                                                 "target is busy; retrying") >= 2;
                      },
                      milliseconds(8000)),
                  d->output());
  CHECK(unmount.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  CHECK(MountSourceOf(d->export_dir()) == loop->path());  // still mounted while held
  close(held);
  held = -1;
  REQUIRE(unmount.wait_for(std::chrono::seconds(15)) == std::future_status::ready);
  const auto done = unmount.get();
  CHECK_MESSAGE(done.ok(), done.error_message());
  CHECK(MountSourceOf(d->export_dir()).empty());
  CHECK(RequireOk(d->Status()).volume_state() == v1::VOLUME_RELEASED);
}

TEST_CASE(
    "owner 11. a full repair whose check fails is tried again 0.5 s, then 1 s later, and the third "
    "attempt serves") {
  SlowFsck fsck;
  auto loop = MakeExt4();
  auto d = Start(*loop);
  REQUIRE(d->WriteEventually("/precious.txt", "kept").ok());
  const size_t checks = fsck.StartTimesNs().size();  // the start-up check
  const uint64_t before = RequireOk(d->Status()).remount_generation();
  fsck.FailNext(2);
  TriggerExt4Error(*loop);
  const auto repaired = d->WaitFor(
      [&](const v1::ShareStatus& s) {
        return s.state() == v1::SERVING && s.remount_generation() > before;
      },
      milliseconds(30'000), "repaired by the third attempt");
  REQUIRE_MESSAGE(repaired.ok(), repaired.status().ToString(), "\n", d->output());
  CHECK(repaired->remount_generation() == before + 1);
  CHECK(fsck.Count("fail") == 2);
  CHECK(d->output().find("attempt 1/3") != std::string::npos);
  CHECK(d->output().find("attempt 2/3") != std::string::npos);
  const auto starts = fsck.StartTimesNs();
  REQUIRE(starts.size() == checks + 3);
  // Between two checks: the pause, then the export drain (200 ms) and the unmount.
  const auto gap = [&](size_t i) { return milliseconds((starts[i + 1] - starts[i]) / 1'000'000); };
  CHECK(gap(checks) >= milliseconds(500));
  CHECK(gap(checks) < milliseconds(1000));
  CHECK(gap(checks + 1) >= milliseconds(1000));
  CHECK(gap(checks + 1) < milliseconds(1500));
  CHECK(RequireOk(d->ReadEventually("/precious.txt")) == "kept");
}

TEST_CASE(
    "owner 12. the status's size_bytes and free_bytes are the export's statvfs, read_only is set "
    "once a filesystem error made it read-only") {
  SlowFsck fsck;
  auto loop = MakeExt4();
  auto d = Start(*loop);
  REQUIRE(testing_support::WaitVolumeProbes(*d, 1));
  struct statvfs vfs {};
  const auto matches = [&] {
    const auto s = d->Status();
    if (!s.ok() || statvfs(d->export_dir().c_str(), &vfs) != 0) return false;
    return s->size_bytes() == static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize &&
           s->free_bytes() == static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  };
  CHECK_MESSAGE(testing_support::WaitFor(matches, milliseconds(5000)),
                RequireOk(d->Status()).ShortDebugString());
  CHECK(vfs.f_bavail > 0);
  CHECK_FALSE(RequireOk(d->Status()).read_only());

  fsck.Slow(true);  // the repair waits in its check: the error stays visible
  TriggerExt4Error(*loop);
  const auto repairing = WaitRepairing(*d);
  REQUIRE_MESSAGE(repairing.ok(), repairing.status().ToString());
  CHECK(repairing->read_only());
  fsck.Slow(false);
  const auto serving = d->WaitServing(milliseconds(30'000));
  REQUIRE_MESSAGE(serving.ok(), serving.status().ToString());
  CHECK_FALSE(serving->read_only());
}
