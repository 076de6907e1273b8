// The device level of a volume against real loop devices: only a device
// without any signature is formatted, e2fsck runs as --fsck-mode says and
// is stopped with SIGTERM only, and a failing device is told apart from a
// damaged filesystem.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "sharemgr/volume.h"
#include "sharemgr/volume_owner.h"
#include "tests/support/daemon_process.h"
#include "tests/support/loop_device.h"
#include "tests/support/make_loop.h"
#include "tests/support/temp_dir.h"

namespace {

using std::chrono::milliseconds;
using testing_support::DaemonProcess;
using testing_support::MakeLoop;
using testing_support::Run;
using testing_support::RunCommand;
using testing_support::TempDir;
using Clock = std::chrono::steady_clock;

// The daemon's output once it holds `needle`: the output reader sees the
// daemon's last lines shortly after its exit.
std::string OutputWith(const DaemonProcess& d, const std::string& needle) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (d.output().find(needle) == std::string::npos && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  return d.output();
}

// A daemon on `device` that is expected to give up: its exit code and output.
struct Refusal {
  int exit_code = -1;
  std::string output;
};

Refusal RunUntilExit(const std::string& device, std::vector<std::string> extra) {
  std::vector<std::string> flags = {"--device", device, "--fs", "ext4", "--failed-linger", "0s"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  auto d = DaemonProcess::Start({.extra_flags = flags, .wait_until_serving = false});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  const auto code = (*d)->WaitExit(milliseconds(60'000));
  REQUIRE_MESSAGE(code.ok(), code.status().ToString(), "\n", (*d)->output());
  return {*code, OutputWith(**d, "volume: ")};
}

// What `blkid -p` (libblkid's low-level probe) sees on the device.
std::string LowProbe(const std::string& device) {
  return RunCommand({"blkid", "-p", device}).output;
}

// Whether the ext magic (0xEF53) is at the superblock that starts at `at`.
bool ExtMagicAt(const std::string& device, uint64_t at) {
  const int fd = open(device.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  REQUIRE(fd >= 0);
  alignas(4096) unsigned char block[4096];
  const ssize_t n = pread(fd, block, sizeof(block), static_cast<off_t>(at & ~uint64_t{4095}));
  close(fd);
  REQUIRE(n == static_cast<ssize_t>(sizeof(block)));
  const uint64_t magic = (at & 4095) + 0x38;
  return block[magic] == 0x53 && block[magic + 1] == 0xEF;
}

// Programs found first in a private directory on PATH, for as long as this
// lives: stand-ins for e2fsck that show how it is called and stopped.
class FakePrograms {
 public:
  FakePrograms() : old_path_(std::getenv("PATH") ? std::getenv("PATH") : "") {
    setenv("PATH", (dir_.path() + ":" + old_path_).c_str(), 1);
  }
  ~FakePrograms() { setenv("PATH", old_path_.c_str(), 1); }
  FakePrograms(const FakePrograms&) = delete;
  FakePrograms& operator=(const FakePrograms&) = delete;

  void Add(const std::string& name, const std::string& script) const {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << script << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  }
  const std::string& dir() const { return dir_.path(); }

 private:
  TempDir dir_;
  std::string old_path_;
};

sharemgr::VolumeConfig ConfigFor(const std::string& device,
                                 const std::string& target = "/nonexistent-target") {
  return {.device = device, .target = target, .device_timeout = milliseconds(0)};
}

// The filesystem on `device` filled to its end and emptied, unmounted again
// before a volume mounts it (XFS skips extents freed by a transaction still
// in flight): all its free space is allocated in the image, for a trim to
// give back.
void FillAndEmpty(const std::string& device, const std::string& dir) {
  REQUIRE(Run({"mount", device, dir}).ok());
  std::ofstream fill(dir + "/fill.bin");
  const std::string mib(size_t{1} << 20, 'x');
  while (fill.write(mib.data(), static_cast<std::streamsize>(mib.size())) && fill.flush()) {
  }
  fill.close();
  REQUIRE(Run({"sync", "-f", dir}).ok());
  std::filesystem::remove(dir + "/fill.bin");
  REQUIRE(Run({"umount", dir}).ok());
}

}  // namespace

TEST_CASE("volume device 1. a gpt partition table without a filesystem is never formatted") {
  auto loop = MakeLoop("");
  REQUIRE(Run({"sh", "-c", "printf 'label: gpt\\n,16M\\n' | sfdisk -q " + loop->path()}).ok());
  const std::string table = RunCommand({"sfdisk", "-d", loop->path()}).output;
  REQUIRE(LowProbe(loop->path()).find("PTTYPE=\"gpt\"") != std::string::npos);

  const auto r = RunUntilExit(loop->path(), {"--format-if-blank"});
  CHECK(r.exit_code == 5);
  CHECK_MESSAGE(r.output.find("holds a gpt partition table") != std::string::npos, r.output);
  CHECK(r.output.find("mkfs") == std::string::npos);
  CHECK(RunCommand({"sfdisk", "-d", loop->path()}).output == table);
  const std::string probe = LowProbe(loop->path());
  CHECK(probe.find("PTTYPE=\"gpt\"") != std::string::npos);
  CHECK(probe.find(" TYPE=") == std::string::npos);
}

TEST_CASE("volume device 2. an ext4 with a zeroed primary superblock is not blank: refused") {
  // Group 1's backup superblock: block 8193 of 1 KiB blocks, 16384 of 2 KiB, 32768 of 4 KiB.
  for (const auto& [block_size, backup_at] :
       {std::pair<int, uint64_t>{1024, 8193 * 1024}, {2048, 16384 * 2048}, {4096, 32768 * 4096}}) {
    CAPTURE(block_size);
    auto loop = MakeLoop("", "160M");
    REQUIRE(Run({"mkfs.ext4", "-q", "-F", "-b", std::to_string(block_size), loop->path()}).ok());
    REQUIRE(Run({"dd", "if=/dev/zero", "of=" + loop->path(), "bs=1024", "seek=1", "count=1",
                 "oflag=direct", "conv=notrunc"})
                .ok());
    // libblkid alone now calls it blank.
    REQUIRE(LowProbe(loop->path()).empty());

    const auto r = RunUntilExit(loop->path(), {"--format-if-blank"});
    CHECK(r.exit_code == 5);
    CHECK_MESSAGE(r.output.find(absl::StrCat("ext2/3/4 backup superblock at byte ", backup_at)) !=
                      std::string::npos,
                  r.output);
    CHECK(r.output.find("mkfs") == std::string::npos);
    CHECK(ExtMagicAt(loop->path(), backup_at));
  }
}

TEST_CASE("volume device 3. a bad --fsck-mode is refused with exit code 2") {
  auto d = DaemonProcess::Start(
      {.extra_flags = {"--fsck-mode", "sometimes"}, .wait_until_serving = false});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  const auto code = (*d)->WaitExit(milliseconds(30'000));
  REQUIRE(code.ok());
  CHECK(*code == 2);
  const std::string output = OutputWith(**d, "--fsck-mode must be preen or yes");
  CHECK_MESSAGE(output.find("--fsck-mode must be preen or yes") != std::string::npos, output);
}

TEST_CASE("volume device 4. errors e2fsck -p cannot fix: exit 5 with its output and the advice") {
  auto loop = MakeLoop("ext4");
  // Clear the root inode and flag the errors.
  REQUIRE(Run({"debugfs", "-w", "-R", "clri <2>", loop->path()}).ok());
  REQUIRE(Run({"debugfs", "-w", "-R", "ssv state 2", loop->path()}).ok());
  {
    // That damage is what preen refuses: e2fsck -p on a copy exits with 4 set.
    TempDir copy;
    REQUIRE(Run({"cp", "--sparse=always", loop->image(), copy.path() + "/image"}).ok());
    const auto preen = RunCommand({"e2fsck", "-p", copy.path() + "/image"});
    REQUIRE_MESSAGE((preen.exit_code & 4) != 0, preen.output);
  }

  SUBCASE("preen (the default) refuses it") {
    const auto r = RunUntilExit(loop->path(), {});
    CHECK(r.exit_code == 5);
    CHECK_MESSAGE(r.output.find("e2fsck -p could not correct") != std::string::npos, r.output);
    CHECK(r.output.find("e2fsck said:") != std::string::npos);
    CHECK(r.output.find("UNEXPECTED INCONSISTENCY") != std::string::npos);
    CHECK(r.output.find("run e2fsck -fy " + loop->path()) != std::string::npos);
    CHECK(r.output.find("--fsck-mode=yes") != std::string::npos);
  }
  SUBCASE("--fsck-mode=yes repairs it and serves") {
    std::vector<std::string> flags = {"--device", loop->path(),  "--fs",
                                      "ext4",     "--fsck-mode", "yes"};
    auto d = DaemonProcess::Start({.extra_flags = flags});
    REQUIRE_MESSAGE(d.ok(), d.status().ToString());
    CHECK((*d)->output().find("e2fsck -y") != std::string::npos);
    CHECK((*d)->WriteEventually("/repaired.txt", "ok").ok());
  }
}

TEST_CASE("volume device 5. CheckDevice: a healthy device answers, a missing one is gone") {
  auto loop = MakeLoop("");
  CHECK(sharemgr::Volume(ConfigFor(loop->path())).CheckDevice().ok());

  TempDir dir;
  const auto gone = sharemgr::Volume(ConfigFor(dir.path() + "/device")).CheckDevice();
  CHECK(gone.code() == absl::StatusCode::kUnavailable);
  CHECK(gone.message() == absl::StrCat("device ", dir.path(), "/device is gone"));

  std::ofstream(dir.path() + "/file") << "not a device";
  const auto file = sharemgr::Volume(ConfigFor(dir.path() + "/file")).CheckDevice();
  CHECK(file.code() == absl::StatusCode::kUnavailable);
  CHECK(file.message().find("is not a block device") != std::string::npos);
}

TEST_CASE("volume device 6. Check runs e2fsck as --fsck-mode and the check's purpose say") {
  auto loop = MakeLoop("ext4");
  FakePrograms fake;
  fake.Add("e2fsck", "echo \"called with $*\"; exit 4");
  for (const auto& [fsck_mode, check_mode, flags] :
       {std::tuple{sharemgr::FsckMode::kPreen, sharemgr::CheckMode::kStartup, "-p"},
        std::tuple{sharemgr::FsckMode::kPreen, sharemgr::CheckMode::kRepair, "-fp"},
        std::tuple{sharemgr::FsckMode::kYes, sharemgr::CheckMode::kStartup, "-y"},
        std::tuple{sharemgr::FsckMode::kYes, sharemgr::CheckMode::kRepair, "-fy"}}) {
    CAPTURE(flags);
    auto config = ConfigFor(loop->path());
    config.fsck_mode = fsck_mode;
    const auto status = sharemgr::Volume(config).Check(check_mode);
    CHECK(status.code() == absl::StatusCode::kDataLoss);
    CHECK_MESSAGE(status.message().find(absl::StrCat("called with ", flags, " ", loop->path())) !=
                      std::string::npos,
                  status.message());
  }
}

TEST_CASE("volume device 7. RequestStop: e2fsck gets SIGTERM and is waited for, never killed") {
  auto loop = MakeLoop("ext4");
  FakePrograms fake;
  // Like e2fsck: stops at a safe point on SIGTERM, with exit 32; takes its time to.
  fake.Add("e2fsck", "trap 'sleep 0.3; echo canceled; exit 32' TERM; touch " + fake.dir() +
                         "/running; sleep 30 & wait");
  sharemgr::Volume volume(ConfigFor(loop->path()));
  std::thread stopper([&] {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!std::filesystem::exists(fake.dir() + "/running") && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(10));
    }
    volume.RequestStop();
  });
  const auto status = volume.Check(sharemgr::CheckMode::kStartup);
  stopper.join();
  CHECK(status.code() == absl::StatusCode::kCancelled);
  CHECK(status.message() == absl::StrCat("stopped: e2fsck of ", loop->path(),
                                         " interrupted (exit 32); the next start checks again"));
  // Once stopped, nothing starts again.
  CHECK(volume.Check(sharemgr::CheckMode::kStartup).code() == absl::StatusCode::kCancelled);
}

TEST_CASE("volume device 8. RequestStop ends the wait for a device at once") {
  TempDir dir;
  auto config = ConfigFor(dir.path() + "/never");
  config.device_timeout = milliseconds(60'000);
  sharemgr::Volume volume(config);
  // The stop comes while the wait runs (not a synchronization: the wait
  // returning no sooner than the stop, and soon after it, is what is checked,
  // against the time the stop was really asked for).
  std::atomic<Clock::rep> stop_at{0};
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(300));
    stop_at = Clock::now().time_since_epoch().count();
    volume.RequestStop();
  });
  const auto status = volume.WaitForDevice();
  const auto returned = Clock::now();
  stopper.join();
  CHECK(status.code() == absl::StatusCode::kCancelled);
  const Clock::time_point stopped{Clock::duration(stop_at.load())};
  CHECK(returned >= stopped);
  CHECK(returned - stopped < milliseconds(2000));
}

TEST_CASE(
    "volume device 9. the owner asks MayTouch before each job that writes the device: one queued "
    "while it allowed is refused once it no longer does (a Mount mounts nothing), an Unmount "
    "runs") {
  auto loop = MakeLoop("ext4");
  TempDir target;
  sharemgr::Volume volume(ConfigFor(loop->path(), target.path()));
  // The fake lease: `allowed`; with `hold`, the next check waits for `go`
  // (the device thread busy with a job's start while more are queued).
  std::atomic<bool> allowed{true};
  std::atomic<bool> hold{false};
  absl::Notification holding;
  absl::Notification go;
  sharemgr::VolumeOwner owner(
      volume, {}, [] {},
      [&]() -> absl::Status {
        if (hold.exchange(false)) {
          holding.Notify();
          go.WaitForNotification();
          return absl::OkStatus();  // answered while the lease still allowed it
        }
        return allowed ? absl::OkStatus() : absl::FailedPreconditionError("lease over (test)");
      });
  std::promise<absl::Status> prepared;
  owner.Prepare([&](absl::Status s) { prepared.set_value(std::move(s)); });
  REQUIRE(prepared.get_future().get().ok());
  REQUIRE(volume.ReadMountState().mounted);

  const auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(60); };
  hold = true;
  auto trim = std::async(std::launch::async, [&] { return owner.Trim(deadline()); });
  // Asked at the trim's start (without the check it never is).
  REQUIRE(holding.WaitForNotificationWithTimeout(absl::Seconds(30)));
  // Queued behind the trim while the lease still allowed it.
  auto resize = std::async(std::launch::async, [&] { return owner.Resize(deadline()); });
  std::this_thread::sleep_for(milliseconds(500));  // its turn taken in the queue
  allowed = false;
  go.Notify();
  // It was let start before the lease ended (its own outcome is the loop
  // device's: discard may be unsupported).
  // (Its next range is not: it stops there, as the lease ended.)
  CHECK(trim.get().status().message().find("not started") == std::string::npos);
  const auto resized = resize.get();
  REQUIRE_FALSE(resized.ok());
  CHECK(resized.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(resized.status().message().find("lease over") != std::string::npos);

  // An unmount shrinks what is held: it still runs.
  CHECK(owner.Release(deadline()).ok());
  CHECK_FALSE(volume.ReadMountState().mounted);
  // A Mount does not: refused, nothing mounted.
  const auto attached = owner.Attach(deadline());
  CHECK(attached.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_FALSE(volume.ReadMountState().mounted);
  CHECK(owner.Stop(std::chrono::seconds(30)));
}

TEST_CASE(
    "volume device 10. a trim in ranges of whole allocation units reaches the filesystem's real "
    "end (ext4, xfs), and past its deadline it stops after one range, saying how far it got") {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  const sharemgr::TrimStopFn kGoOn = [] { return absl::OkStatus(); };
  for (const sharemgr::FsType fs : {sharemgr::FsType::kExt4, sharemgr::FsType::kXfs}) {
    const std::string name = sharemgr::FsName(fs);
    CAPTURE(name);
    auto loop = MakeLoop(name, "320M");
    const uint64_t fresh = AllocatedBytes(*loop);
    TempDir target("sharemgr-trim");
    FillAndEmpty(loop->path(), target.path());
    REQUIRE(AllocatedBytes(*loop) > fresh + 200 * kMiB);  // xfs's log takes 64 MiB
    sharemgr::VolumeConfig config = ConfigFor(loop->path(), target.path());
    config.fs = fs;
    // Not a whole number of either filesystem's units.
    config.trim_chunk_bytes = 100 * kMiB;
    const sharemgr::Volume volume(config);
    REQUIRE(volume.Mount().ok());

    const auto stopped = volume.Trim(Clock::now() - std::chrono::seconds(1), kGoOn);
    CHECK(stopped.status().code() == absl::StatusCode::kDeadlineExceeded);
    // A range is whole allocation units (ext4 of 320 MiB: 1 KiB blocks,
    // 8 MiB block groups, 12 fit; xfs: 4 AGs of 80 MiB, one), and the end is
    // the filesystem's real size, not statvfs's (ext4 ~290 MiB, xfs ~256 MiB
    // without its log).
    // ext4: 12 whole 8 MiB groups. xfs: one 80 MiB AG where the kernel
    // discards overlapped extents whole, else the 100 MiB asked.
    const std::string want = fs == sharemgr::FsType::kExt4 ? " in the first 96.0 MiB of 320.0 MiB"
                             : sharemgr::KernelClampsXfsTrimRanges()
                                 ? " in the first 100.0 MiB of 320.0 MiB"
                                 : " in the first 80.0 MiB of 320.0 MiB";
    CHECK_MESSAGE(stopped.status().message().find(want) != std::string::npos, stopped.status());

    // The whole filesystem, its last range included: the image is back to
    // about its fresh size (the first range's blocks, trimmed above, too).
    const auto trimmed = volume.Trim(Clock::now() + std::chrono::seconds(120), kGoOn);
    REQUIRE_MESSAGE(trimmed.ok(), trimmed.status());
    CHECK(*trimmed > 150 * kMiB);
    // Measured once unmounted: xfs's FITRIM returns before the loop device
    // has carried out its discards; the unmount waits for them.
    CHECK(volume.Unmount(milliseconds(10'000)).ok());
    CHECK(AllocatedBytes(*loop) < fresh + 32 * kMiB);
  }
}

TEST_CASE(
    "volume device 11. the owner stops a trim's work at its start + max_op_time "
    "(--max-volume-op-time), however far off the caller's deadline is") {
  auto loop = MakeLoop("ext4");
  TempDir target;
  sharemgr::VolumeConfig config = ConfigFor(loop->path(), target.path());
  config.trim_chunk_bytes = 16 << 20;
  sharemgr::Volume volume(config);
  sharemgr::VolumeOwner owner(volume, {.max_op_time = milliseconds(0)}, [] {});
  std::promise<absl::Status> prepared;
  owner.Prepare([&](absl::Status s) { prepared.set_value(std::move(s)); });
  REQUIRE(prepared.get_future().get().ok());

  const auto trimmed = owner.Trim(std::chrono::system_clock::now() + std::chrono::minutes(10));
  CHECK(trimmed.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK_MESSAGE(trimmed.status().message().find(" in the first 16.0 MiB of ") != std::string::npos,
                trimmed.status());
  // Stopped between ranges, not wedged: the owner takes the next operation.
  CHECK(owner.Release(std::chrono::system_clock::now() + std::chrono::seconds(30)).ok());
  CHECK(owner.Stop(std::chrono::seconds(30)));
}

TEST_CASE(
    "volume device 12. a running trim stops after the range it is trimming once the owner is "
    "fenced (no FITRIM after the lease) or a repair is queued") {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  for (const bool fence : {true, false}) {
    CAPTURE(fence);
    auto loop = MakeLoop("ext4", "320M");
    const uint64_t fresh = AllocatedBytes(*loop);
    TempDir target("sharemgr-trim");
    FillAndEmpty(loop->path(), target.path());
    const uint64_t filled = AllocatedBytes(*loop);
    REQUIRE(filled > fresh + 200 * kMiB);
    sharemgr::VolumeConfig config = ConfigFor(loop->path(), target.path());
    config.trim_chunk_bytes = 16 * kMiB;
    sharemgr::Volume volume(config);
    // The lease, asked before a job starts and before each of a trim's
    // ranges: call `hold_at` waits for `go` (a slow range, seen from the
    // trim's side).
    std::atomic<int> asked{0};
    std::atomic<int> hold_at{0};
    absl::Notification holding;
    absl::Notification go;
    // Before the owner: its destructor may still finish the repair and call back.
    std::promise<absl::Status> repaired;
    sharemgr::VolumeOwner owner(
        volume, {}, [] {},
        [&] {
          if (++asked == hold_at) {
            holding.Notify();
            go.WaitForNotification();
          }
          return absl::OkStatus();
        });
    std::promise<absl::Status> prepared;
    owner.Prepare([&](absl::Status s) { prepared.set_value(std::move(s)); });
    REQUIRE(prepared.get_future().get().ok());

    // The trim's start, before its first range, before its second.
    hold_at = asked + 3;
    auto trim = std::async(std::launch::async, [&] {
      return owner.Trim(std::chrono::system_clock::now() + std::chrono::seconds(60));
    });
    const bool held = holding.WaitForNotificationWithTimeout(absl::Seconds(20));
    if (fence) {
      owner.Fence("lease lost (test)");
    } else {
      owner.RepairFull("test", [&](absl::Status s) { repaired.set_value(std::move(s)); });
    }
    go.Notify();
    REQUIRE_MESSAGE(held, "the trim never asked between its ranges");
    const auto trimmed = trim.get();
    REQUIRE_FALSE(trimmed.ok());
    if (fence) {
      // The caller is answered by the fence itself.
      CHECK(trimmed.status().code() == absl::StatusCode::kFailedPrecondition);
      CHECK(owner.Stop(std::chrono::seconds(30)));
    } else {
      CHECK(trimmed.status().code() == absl::StatusCode::kUnavailable);
      CHECK_MESSAGE(trimmed.status().message().find("a repair of the filesystem is waiting: "
                                                    "trimmed ") != std::string::npos,
                    trimmed.status());
      CHECK(repaired.get_future().get().ok());
      CHECK(owner.Stop(std::chrono::seconds(30)));
    }
    CHECK_FALSE(volume.ReadMountState().mounted);
    // One 16 MiB range discarded, not the whole free space.
    CHECK(AllocatedBytes(*loop) > filled - 32 * kMiB);
  }
}
