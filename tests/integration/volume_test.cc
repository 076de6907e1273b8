// Block-device volumes end to end: real loop devices with ext4 and xfs, real
// ganesha, a real NFS client, failures made by the kernel itself.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "longhorn/smrpc.grpc.pb.h"
#include "tests/support/count_occurrences.h"
#include "tests/support/daemon_process.h"
#include "tests/support/loop_device.h"
#include "tests/support/make_loop.h"
#include "tests/support/nfs_client.h"
#include "tests/support/require_ok.h"
#include "tests/support/skip.h"
#include "tests/support/temp_dir.h"
#include "tests/support/volume_probes.h"
#include "tests/support/wait_for.h"

namespace {

namespace v1 = sharemanager::v1;
using std::chrono::milliseconds;
using testing_support::DaemonProcess;
using testing_support::LoopDevice;
using testing_support::MakeLoop;
using testing_support::MountSourceOf;
using testing_support::RequireOk;
using testing_support::Run;
using testing_support::RunCommand;
using testing_support::ShareManagerBinary;

std::unique_ptr<DaemonProcess> StartOn(const LoopDevice& loop, const std::string& fs,
                                       std::vector<std::string> extra = {}) {
  std::vector<std::string> flags = {"--device", loop.path(), "--fs", fs, "--volume-probe-interval",
                                    "200ms"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  auto d = DaemonProcess::Start({.extra_flags = flags});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  return std::move(*d);
}

// A name for a loop device in a private temp dir, which can appear and vanish
// under a running daemon as Longhorn's /dev/longhorn/<volume> does. The dir
// is removed when this goes, pass or fail; declare it before the daemon.
class DeviceName {
 public:
  std::string path() const { return dir_.path() + "/device"; }
  void Appear(const LoopDevice& loop) const {
    std::filesystem::create_symlink(loop.path(), path());
  }
  void Vanish() const { std::filesystem::remove(path()); }

 private:
  testing_support::TempDir dir_{"sharemgr-device"};
};

// Collects WatchStatus messages until one matches (or the watch's deadline).
std::vector<v1::ShareStatus> WatchUntil(const DaemonProcess& d,
                                        const std::function<void()>& trigger,
                                        const std::function<bool(const v1::ShareStatus&)>& done,
                                        std::chrono::seconds deadline = std::chrono::seconds(30)) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  auto stream = d.Stub()->WatchStatus(&context, v1::WatchStatusRequest());
  std::vector<v1::ShareStatus> seen;
  v1::ShareStatus s;
  REQUIRE(stream->Read(&s));
  seen.push_back(s);
  trigger();
  while (stream->Read(&s)) {
    seen.push_back(s);
    if (done(s)) break;
  }
  context.TryCancel();
  return seen;
}

// Remounts the export read-only from outside; the statuses seen until SERVING
// again with a remount generation above `before` (or until the watch ends).
std::vector<v1::ShareStatus> RemountReadOnlyUntilRepaired(
    const DaemonProcess& d, uint64_t before,
    std::chrono::seconds deadline = std::chrono::seconds(30)) {
  return WatchUntil(
      d,
      [&] {
        REQUIRE(Run({"mount", "-o", "remount,ro", d.export_dir()}).ok());
      },
      [&](const v1::ShareStatus& s) {
        return s.state() == v1::SERVING && s.remount_generation() > before;
      },
      deadline);
}

bool Saw(const std::vector<v1::ShareStatus>& seen, v1::ShareState state) {
  return std::any_of(seen.begin(), seen.end(), [&](const auto& s) { return s.state() == state; });
}

}  // namespace

TEST_CASE("volume 1. an ext4 device is checked, mounted and exported, an NFS write lands on it") {
  auto loop = MakeLoop("ext4");
  auto d = StartOn(*loop, "ext4");
  const auto status = d->Status();
  REQUIRE(status.ok());
  CHECK(status->device() == loop->path());
  CHECK(status->filesystem() == "ext4");
  CHECK(status->mount_options().find("errors=remount-ro") != std::string::npos);
  CHECK(status->size_bytes() > 0);
  CHECK(MountSourceOf(d->export_dir()) == loop->path());
  REQUIRE(d->WriteEventually("/on-ext4.txt", "landed").ok());
  std::ifstream in(d->export_dir() + "/on-ext4.txt");
  std::string content;
  in >> content;
  CHECK(content == "landed");
}

TEST_CASE(
    "volume 2. a read-only remount from outside is detected and repaired, generation +1 exactly") {
  auto loop = MakeLoop("ext4");
  auto d = StartOn(*loop, "ext4");
  const uint64_t before = RequireOk(d->Status()).remount_generation();
  const auto seen = RemountReadOnlyUntilRepaired(*d, before);
  CHECK(seen.back().remount_generation() == before + 1);
  CHECK(seen.back().volume_repairs() == 1);  // what `share-manager status` shows
  // Three volume probes later (seen, not slept for): no further bumps.
  REQUIRE_MESSAGE(testing_support::WaitVolumeProbes(*d, 3), d->output());
  CHECK(RequireOk(d->Status()).remount_generation() == before + 1);
  // Detected as what it was, and repaired once by the cheap repair. (The
  // DEGRADED state itself can last a millisecond, and WatchStatus sends the
  // latest state, not every one: the log is the record of each repair.)
  const std::string output = d->output();
  CHECK_MESSAGE(
      testing_support::CountOccurrences(output, d->export_dir() + ": remount read-write") == 1,
      output);
  CHECK(testing_support::CountOccurrences(output, "then check the device") == 0);
  CHECK(d->WriteEventually("/after-remount.txt", "ok").ok());
}

TEST_CASE("volume 2b. each in-place repair makes the share SERVING itself, not a later NFS probe") {
  auto loop = MakeLoop("ext4");
  // NFS probes a minute apart: readiness must not depend on one coming along.
  auto d = StartOn(*loop, "ext4", {"--probe-interval", "60s"});
  // Our own remount fires a mountinfo event whose probe may finish before the
  // repair does; repeat so that ordering is hit too.
  for (int i = 0; i < 20; ++i) {
    CAPTURE(i);
    const uint64_t before = RequireOk(d->Status()).remount_generation();
    const auto seen = RemountReadOnlyUntilRepaired(*d, before);
    REQUIRE(seen.back().state() == v1::SERVING);
    REQUIRE(seen.back().remount_generation() == before + 1);
  }
}

TEST_CASE("volume 2c. a read-only remount is seen through the mountinfo event, not a later probe") {
  auto loop = MakeLoop("ext4");
  // The next volume probe is a minute away: only the event can tell in time.
  auto d = StartOn(*loop, "ext4", {"--volume-probe-interval", "60s"});
  const uint64_t before = d->Status()->remount_generation();
  const auto seen = RemountReadOnlyUntilRepaired(*d, before, std::chrono::seconds(10));
  CHECK(seen.back().state() == v1::SERVING);
  CHECK(seen.back().remount_generation() == before + 1);
  // The log line reaches output() through a pipe: maybe after the status.
  CHECK_MESSAGE(testing_support::WaitFor(
                    [&] {
                      return testing_support::CountOccurrences(d->output(),
                                                               "is mounted read-only") >= 1;
                    },
                    std::chrono::seconds(5)),
                d->output());
}

TEST_CASE("volume 3. an ext4 filesystem error runs the full repair, data intact, writes resume") {
  auto loop = MakeLoop("ext4");
  auto d = StartOn(*loop, "ext4");
  REQUIRE(d->WriteEventually("/before-error.txt", "precious").ok());
  const uint64_t before = RequireOk(d->Status()).remount_generation();
  const std::string sysfs = "/sys/fs/ext4/" +
                            std::filesystem::path(loop->path()).filename().string() +
                            "/trigger_fs_error";
  const auto seen = WatchUntil(
      *d,
      [&] {
        std::ofstream trigger(sysfs);
        trigger << "test error\n";
      },
      [&](const v1::ShareStatus& s) {
        return s.state() == v1::SERVING && s.remount_generation() > before;
      },
      std::chrono::seconds(15));
  CHECK(Saw(seen, v1::DEGRADED));
  REQUIRE_MESSAGE(seen.back().state() == v1::SERVING, "not repaired:\n", d->output());
  CHECK(seen.back().remount_generation() == before + 1);
  CHECK(d->output().find("e2fsck -f") != std::string::npos);
  const auto data = d->ReadEventually("/before-error.txt");
  REQUIRE_MESSAGE(data.ok(), data.status().ToString());
  CHECK(*data == "precious");
  CHECK(d->WriteEventually("/after-error.txt", "ok").ok());
  CHECK(RequireOk(d->Status()).remount_generation() == before + 1);
}

TEST_CASE(
    "volume 3b. an XFS shutdown (every I/O fails with EIO) is repaired by unmount and mount") {
  auto loop = MakeLoop("xfs", "320M");  // XFS wants at least 300 MB
  auto d = StartOn(*loop, "xfs");
  REQUIRE(d->WriteEventually("/before-shutdown.txt", "precious").ok());
  const uint64_t before = RequireOk(d->Status()).remount_generation();
  const auto seen = WatchUntil(
      *d,
      [&] {
        REQUIRE(Run({"xfs_io", "-x", "-c", "shutdown", d->export_dir()}).ok());
      },
      [&](const v1::ShareStatus& s) {
        return s.state() == v1::SERVING && s.remount_generation() > before;
      });
  CHECK(Saw(seen, v1::DEGRADED));
  CHECK(seen.back().remount_generation() == before + 1);
  const auto data = d->ReadEventually("/before-shutdown.txt");
  REQUIRE_MESSAGE(data.ok(), data.status().ToString());
  CHECK(*data == "precious");
  CHECK(d->WriteEventually("/after-shutdown.txt", "ok").ok());
}

TEST_CASE("volume 4. a failure that cannot be repaired: FAILED and exit code 5, nothing hangs") {
  auto loop = MakeLoop("ext4");
  // The daemon knows the device by a name that the test then removes, as
  // Longhorn's /dev/longhorn/<volume> vanishes on a detach. (Detaching the loop
  // device itself would free its number for a test running beside this one.)
  const DeviceName name;
  name.Appear(*loop);
  {
    auto d = DaemonProcess::Start(
        {.extra_flags = {"--device", name.path(), "--fs", "ext4", "--volume-probe-interval",
                         "200ms", "--failed-linger", "500ms"}});
    REQUIRE_MESSAGE(d.ok(), d.status().ToString());
    // The device goes away under the mounted filesystem, then ext4 fails:
    // every repair attempt finds the device gone.
    name.Vanish();
    std::ofstream("/sys/fs/ext4/" + std::filesystem::path(loop->path()).filename().string() +
                  "/trigger_fs_error")
        << "test error\n";
    const auto failed =
        (*d)->WaitFor([](const v1::ShareStatus& s) { return s.state() == v1::FAILED; },
                      milliseconds(30'000), "FAILED");
    REQUIRE_MESSAGE(failed.ok(), failed.status().ToString(), "\n", (*d)->output());
    // The device check before any fsck tells a gone device from a damaged filesystem.
    CHECK_MESSAGE(failed->reason().find("is gone") != std::string::npos, failed->reason());
    CHECK(failed->reason().find("not repairing the filesystem") != std::string::npos);
    const auto code = (*d)->WaitExit(milliseconds(20'000));
    REQUIRE(code.ok());
    CHECK(*code == 5);
  }
}

TEST_CASE("volume 5. trim returns the bytes trimmed") {
  auto loop = MakeLoop("ext4");
  auto d = StartOn(*loop, "ext4");
  REQUIRE(d->WriteEventually("/big.bin", std::string(1 << 20, 'x')).ok());
  std::filesystem::remove(d->export_dir() + "/big.bin");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::FilesystemTrimResponse response;
  const auto rpc = d->Stub()->FilesystemTrim(&context, v1::FilesystemTrimRequest(), &response);
  REQUIRE_MESSAGE(rpc.ok(), rpc.error_message());
  CHECK(response.bytes_trimmed() > 0);
}

v1::FilesystemResizeResponse Resize(const DaemonProcess& d, grpc::Status* rpc) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::FilesystemResizeResponse response;
  *rpc = d.Stub()->FilesystemResize(&context, v1::FilesystemResizeRequest(), &response);
  return response;
}

bool HasCapability(int cap) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> cap) & 1;
  }
  return false;
}

TEST_CASE("volume 6. grow the device, resize online: bigger, data intact, again is a no-op (xfs)") {
  auto loop = MakeLoop("xfs", "320M");
  auto d = StartOn(*loop, "xfs");
  REQUIRE(d->WriteEventually("/kept.txt", "kept").ok());
  REQUIRE(loop->Grow("480M").ok());
  grpc::Status rpc;
  const auto first = Resize(*d, &rpc);
  REQUIRE_MESSAGE(rpc.ok(), rpc.error_message());
  CHECK(first.resized());
  CHECK(first.new_size_bytes() > first.old_size_bytes() + (100ull << 20));
  const auto second = Resize(*d, &rpc);
  REQUIRE_MESSAGE(rpc.ok(), rpc.error_message());
  CHECK_FALSE(second.resized());
  CHECK(second.new_size_bytes() == first.new_size_bytes());
  CHECK(RequireOk(d->ReadEventually("/kept.txt")) == "kept");
}

// The filesystem's size as the kernel reports it for the mounted export.
uint64_t FilesystemBytes(const std::string& mount_point) {
  struct statvfs st {};
  REQUIRE(statvfs(mount_point.c_str(), &st) == 0);
  return static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
}

uint64_t DeviceBytes(const LoopDevice& loop) {
  const auto out = RunCommand({"blockdev", "--getsize64", loop.path()});
  REQUIRE_MESSAGE(out.exit_code == 0, out.output);
  return std::stoull(out.output);
}

constexpr int kCapSysResource = 24;

// The kernel grows ext4 online only for CAP_SYS_RESOURCE (ext4_resize_begin);
// the daemon here runs without it whatever this machine grants.
TEST_CASE(
    "volume 6b. without CAP_SYS_RESOURCE, growing ext4 online is refused naming the capability, "
    "the filesystem keeps its size and the share keeps serving") {
  auto loop = MakeLoop("ext4", "64M");
  auto d = DaemonProcess::Start({.extra_flags = {"--device", loop->path(), "--fs", "ext4"},
                                 .wrapper = {"setpriv", "--bounding-set=-sys_resource", "--"}});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  REQUIRE((*d)->WriteEventually("/kept.txt", "kept").ok());
  const uint64_t before = FilesystemBytes((*d)->export_dir());
  REQUIRE(loop->Grow("128M").ok());
  REQUIRE(DeviceBytes(*loop) == (128ull << 20));  // the device did grow: only the capability lacks
  grpc::Status rpc;
  Resize(**d, &rpc);
  CHECK(rpc.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_MESSAGE(rpc.error_message().find("CAP_SYS_RESOURCE") != std::string::npos,
                rpc.error_message());
  CHECK(FilesystemBytes((*d)->export_dir()) == before);
  CHECK(RequireOk((*d)->ReadEventually("/kept.txt")) == "kept");
  CHECK(RequireOk((*d)->Status()).state() == v1::SERVING);
}

TEST_CASE(
    "volume 6c. with CAP_SYS_RESOURCE ext4 grows online: bigger, data intact, again a no-op") {
  if (!HasCapability(kCapSysResource)) {
    testing_support::SkipTestCase(
        "CAP_SYS_RESOURCE is not in this process's capability set (bounding set of the "
        "container): the kernel refuses to grow ext4 online without it");
    return;
  }
  auto loop = MakeLoop("ext4", "64M");
  auto d = StartOn(*loop, "ext4");
  REQUIRE(d->WriteEventually("/kept.txt", "kept").ok());
  const uint64_t before = FilesystemBytes(d->export_dir());
  REQUIRE(loop->Grow("128M").ok());
  grpc::Status rpc;
  const auto first = Resize(*d, &rpc);
  REQUIRE_MESSAGE(rpc.ok(), rpc.error_message());
  CHECK(first.resized());
  CHECK(first.new_size_bytes() > first.old_size_bytes() + (50ull << 20));
  CHECK(FilesystemBytes(d->export_dir()) > before + (50ull << 20));
  const auto second = Resize(*d, &rpc);
  REQUIRE_MESSAGE(rpc.ok(), rpc.error_message());
  CHECK_FALSE(second.resized());
  CHECK(RequireOk(d->ReadEventually("/kept.txt")) == "kept");
}

TEST_CASE("volume 7. bad devices are refused with a clear error and exit code 5") {
  const testing_support::TempDir temp("sharemgr-vol7");
  const std::string& dir = temp.path();
  auto daemon = [&](const std::string& device, std::vector<std::string> extra) {
    std::vector<std::string> argv = {
        ShareManagerBinary(), "daemon",
        "--volume",           "pvc-bad",
        "--export-dir",       dir + "/export",
        "--state-dir",        dir + "/state",
        "--nfs-address",      "127.0.0.1",
        "--nfs-port",         std::to_string(base::FreeLoopbackPort()),
        "--listen",           "127.0.0.1:" + std::to_string(base::FreeLoopbackPort()),
        "--health-listen",    "none",
        "--device",           device,
        "--failed-linger",    "0s"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv, milliseconds(30'000));
  };
  SUBCASE("missing device: times out") {
    const auto r = daemon("/dev/does-not-exist", {"--device-timeout", "300ms"});
    CHECK(r.exit_code == 5);
    CHECK(r.output.find("did not appear within 300ms") != std::string::npos);
  }
  SUBCASE("blank device without --format-if-blank") {
    auto loop = MakeLoop("");
    const auto r = daemon(loop->path(), {});
    CHECK(r.exit_code == 5);
    CHECK(r.output.find("has no filesystem; refusing to format it") != std::string::npos);
  }
  SUBCASE("wrong filesystem") {
    auto loop = MakeLoop("ext4");
    const auto r = daemon(loop->path(), {"--fs", "xfs"});
    CHECK(r.exit_code == 5);
    CHECK(r.output.find("holds a ext4 filesystem but --fs is xfs") != std::string::npos);
  }
  SUBCASE("corrupted filesystem") {
    auto loop = MakeLoop("ext4");
    // Clear the root inode and flag the errors: e2fsck -p cannot fix that unattended.
    REQUIRE(Run({"debugfs", "-w", "-R", "clri <2>", loop->path()}).ok());
    REQUIRE(Run({"debugfs", "-w", "-R", "ssv state 2", loop->path()}).ok());
    const auto r = daemon(loop->path(), {});
    CHECK(r.exit_code == 5);
    CHECK(r.output.find("could not correct") != std::string::npos);
    CHECK(MountSourceOf(dir + "/export").empty());
  }
}

TEST_CASE("volume 7b. a blank device with --format-if-blank is formatted and served") {
  auto loop = MakeLoop("");
  auto d = StartOn(*loop, "ext4", {"--format-if-blank", "--mkfs-option=-Lshare"});
  CHECK(d->output().find("is blank: formatting as ext4") != std::string::npos);
  CHECK(d->WriteEventually("/fresh.txt", "fresh").ok());
}

TEST_CASE("volume 7c. a device that appears late: alive while awaited, then served") {
  auto loop = MakeLoop("ext4");
  const DeviceName name;  // where the device will show up
  {
    auto d = DaemonProcess::Start(
        {.extra_flags = {"--device", name.path(), "--fs", "ext4", "--device-timeout", "30s"},
         .wait_until_serving = false});
    REQUIRE_MESSAGE(d.ok(), d.status().ToString());
    // A negative wait, the assertion itself: longer than the loop stall limit
    // (3 s), liveness checked all along: waiting for an attach is not a
    // wedged daemon.
    const auto alive = [&] {
      const auto live = (*d)->HealthServing("liveness");
      return live.ok() && *live;
    };
    REQUIRE(testing_support::WaitFor(alive, milliseconds(10'000)));  // gRPC is up
    CHECK(testing_support::HoldsFor(alive, milliseconds(4000)));
    const auto live = (*d)->HealthServing("liveness");
    const auto ready = (*d)->HealthServing("readiness");
    REQUIRE(live.ok());
    REQUIRE(ready.ok());
    CHECK(*live);
    CHECK_FALSE(*ready);
    CHECK((*d)->output().find("liveness NOT_SERVING") == std::string::npos);

    REQUIRE(std::filesystem::exists(loop->path()));
    name.Appear(*loop);
    const auto serving = (*d)->WaitServing(milliseconds(20'000));
    REQUIRE_MESSAGE(serving.ok(), serving.status().ToString());
    CHECK(serving->device() == name.path());
    CHECK((*d)->WriteEventually("late.txt", "attached late").ok());
  }
}

TEST_CASE("volume 8. Unmount and Mount round trip, stop with a client connected unmounts cleanly") {
  auto loop = MakeLoop("ext4");
  auto d = StartOn(*loop, "ext4");
  REQUIRE(d->WriteEventually("/round.txt", "trip").ok());
  auto stub = d->Stub();
  {
    grpc::ClientContext ctx;
    v1::UnmountResponse resp;
    REQUIRE(stub->Unmount(&ctx, v1::UnmountRequest(), &resp).ok());
  }
  REQUIRE(d->WaitFor([](const auto& s) { return s.state() == v1::DEGRADED; }, milliseconds(5000),
                     "DEGRADED")
              .ok());
  CHECK(MountSourceOf(d->export_dir()).empty());  // unexported, then unmounted
  // A negative wait, the assertion itself: for two volume probe intervals
  // (200 ms) the volume stays unmounted, checked all along: nothing
  // "repairs" a volume released by Unmount.
  CHECK_MESSAGE(testing_support::HoldsFor([&] { return MountSourceOf(d->export_dir()).empty(); },
                                          milliseconds(500)),
                d->output());
  {
    grpc::ClientContext ctx;
    v1::MountResponse resp;
    REQUIRE(stub->Mount(&ctx, v1::MountRequest(), &resp).ok());
  }
  REQUIRE(d->WaitServing().ok());
  CHECK(MountSourceOf(d->export_dir()) == loop->path());
  CHECK(RequireOk(d->ReadEventually("/round.txt")) == "trip");

  auto client = testing_support::NfsClient::Connect("127.0.0.1", d->nfs_port(), d->pseudo_path());
  REQUIRE(client.ok());  // stays connected through the stop
  const std::string export_dir = d->export_dir();
  d->Signal(SIGTERM);
  const auto code = d->WaitExit(milliseconds(20'000));
  REQUIRE(code.ok());
  CHECK(*code == 0);
  CHECK(MountSourceOf(export_dir).empty());
  CHECK(d->output().find("unmounted " + export_dir) != std::string::npos);
}

TEST_CASE(
    "volume 9. Longhorn's invocation serves /export/<volume> from /dev/longhorn/<volume>: its "
    "Trim frees the device's blocks, Unmount unmounts, Mount serves again, Resize grows") {
  // XFS: it grows online without CAP_SYS_RESOURCE, so every call's effect shows here.
  auto loop = MakeLoop("xfs", "320M");
  const uint64_t fresh = AllocatedBytes(*loop);
  {
    // 16 MiB written and deleted stay allocated in the sparse image until a
    // trim. Done before the daemon, and unmounted: XFS skips extents freed by
    // a transaction still in flight, which a sync does not always settle.
    const testing_support::TempDir mnt("sharemgr-prefill");
    REQUIRE(Run({"mount", loop->path(), mnt.path()}).ok());
    std::ofstream(mnt.path() + "/trimmed.bin") << std::string(16 << 20, 'x');
    REQUIRE(Run({"sync", "-f", mnt.path() + "/trimmed.bin"}).ok());
    std::filesystem::remove(mnt.path() + "/trimmed.bin");
    REQUIRE(Run({"umount", mnt.path()}).ok());
  }
  REQUIRE(AllocatedBytes(*loop) >= fresh + (12ull << 20));
  const std::string volume = "pvc-lh-" + std::to_string(getpid());
  const std::string device_link = "/dev/longhorn/" + volume;
  const std::string export_dir = "/export/" + volume;
  std::filesystem::create_directories("/dev/longhorn");
  std::filesystem::create_symlink(loop->path(), device_link);
  struct Cleanup {
    std::string link, dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove(link, ec);
      std::filesystem::remove(dir, ec);  // empty once unmounted; never through a mount
      // The parents too, when this test made them and nothing else is in them.
      std::filesystem::remove("/dev/longhorn", ec);
      std::filesystem::remove("/export", ec);
    }
  } cleanup{device_link, export_dir};
  // As longhorn-manager starts it (plus --longhorn-compat): no --device, no
  // --export-dir (ports moved off 9600/2049 so tests can run beside a real
  // share). Declared after the cleanup: stopped, and its mount gone, before
  // the directories go.
  auto d = DaemonProcess::Start({.volume = volume,
                                 .extra_flags = {"--longhorn-compat", "--data-engine", "v1", "--fs",
                                                 "xfs", "--mount", "noatime"},
                                 .default_export_dir = true,
                                 .global_flags = {"--debug"}});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  const auto status = RequireOk((*d)->Status());
  CHECK(status.device() == device_link);
  CHECK(status.export_path() == export_dir);
  CHECK(status.mount_options().find("noatime") != std::string::npos);
  CHECK(MountSourceOf(export_dir) == loop->path());
  REQUIRE((*d)->WriteEventually("/lh.txt", "lh").ok());

  auto longhorn = ShareManagerService::NewStub(
      grpc::CreateChannel((*d)->addr(), grpc::InsecureChannelCredentials()));
  auto call = [&](auto method, const auto& request) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    google::protobuf::Empty response;
    return ((*longhorn).*method)(&ctx, request, &response);
  };

  const uint64_t allocated = AllocatedBytes(*loop);
  FilesystemTrimRequest trim;
  trim.set_encrypted_device(false);
  const auto trimmed = call(&ShareManagerService::Stub::FilesystemTrim, trim);
  CHECK_MESSAGE(trimmed.ok(), trimmed.error_message());
  CHECK(AllocatedBytes(*loop) + (8 << 20) < allocated);

  const auto unmounted = call(&ShareManagerService::Stub::Unmount, google::protobuf::Empty());
  CHECK_MESSAGE(unmounted.ok(), unmounted.error_message());
  CHECK(testing_support::WaitFor([&] { return MountSourceOf(export_dir).empty(); },
                                 milliseconds(10'000)));
  CHECK_FALSE(RequireOk((*d)->Status()).exported());
  CHECK_FALSE(
      testing_support::ReadOnce("127.0.0.1", (*d)->nfs_port(), "/" + volume, "/lh.txt").ok());

  const auto mounted = call(&ShareManagerService::Stub::Mount, google::protobuf::Empty());
  CHECK_MESSAGE(mounted.ok(), mounted.error_message());
  REQUIRE((*d)->WaitServing().ok());
  CHECK(MountSourceOf(export_dir) == loop->path());
  CHECK(RequireOk((*d)->ReadEventually("/lh.txt")) == "lh");
  CHECK((*d)->WriteEventually("/after-mount.txt", "again").ok());

  const uint64_t before = FilesystemBytes(export_dir);
  REQUIRE(loop->Grow("480M").ok());
  const auto resized =
      call(&ShareManagerService::Stub::FilesystemResize, google::protobuf::Empty());
  CHECK_MESSAGE(resized.ok(), resized.error_message());
  CHECK(FilesystemBytes(export_dir) > before + (100ull << 20));

  (*d)->Signal(SIGTERM);
  CHECK(RequireOk((*d)->WaitExit(milliseconds(15'000))) == 0);
  CHECK(MountSourceOf(export_dir).empty());
}
