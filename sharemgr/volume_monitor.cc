#include "sharemgr/volume_monitor.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/fmt_absl.h"

namespace sharemgr {
namespace {

using std::chrono::milliseconds;

const char* Name(VolumeCondition c) {
  switch (c) {
    case VolumeCondition::kHealthy:
      return "healthy";
    case VolumeCondition::kReadOnly:
      return "read-only";
    case VolumeCondition::kFsError:
      return "filesystem error";
    case VolumeCondition::kUnmounted:
      return "not mounted";
    case VolumeCondition::kStuck:
      return "I/O stuck";
    case VolumeCondition::kReleased:
      return "unmounted by Unmount";
  }
  return "unknown";
}

// stat and read the export root; EIO (an XFS shutdown) is a filesystem error.
absl::Status ProbeIo(const std::string& target) {
  struct stat st {};
  if (stat(target.c_str(), &st) != 0) {
    return absl::DataLossError(absl::StrCat("stat ", target, ": ", std::strerror(errno)));
  }
  DIR* dir = opendir(target.c_str());
  if (dir == nullptr) {
    return absl::DataLossError(absl::StrCat("opendir ", target, ": ", std::strerror(errno)));
  }
  errno = 0;
  while (readdir(dir) != nullptr) {
  }
  const int err = errno;
  closedir(dir);
  if (err != 0)
    return absl::DataLossError(absl::StrCat("readdir ", target, ": ", std::strerror(err)));
  return absl::OkStatus();
}

}  // namespace

VolumeMonitor::VolumeMonitor(supervisor::EventLoop& loop, Volume& volume,
                             base::Duration probe_interval, VolumeHooks hooks)
    : loop_(loop),
      volume_(volume),
      probe_interval_(probe_interval),
      hooks_(std::move(hooks)),
      probe_timer_(loop, [this] { Check(); }),
      retry_timer_(loop, [this] { Repair(); }),
      probe_worker_(loop),
      repair_worker_(loop) {}

VolumeMonitor::~VolumeMonitor() {
  if (mountinfo_token_ != 0) loop_.Unwatch(mountinfo_token_);
}

void VolumeMonitor::Start() {
  mountinfo_.reset(open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC));
  if (mountinfo_) {
    // The kernel flags the mount table with POLLPRI on every (un)mount or remount.
    mountinfo_token_ = loop_.Watch(mountinfo_.get(), EPOLLPRI, [this](uint32_t) { Check(); });
  } else {
    spdlog::warn("cannot watch /proc/self/mountinfo: {}; relying on the periodic probe",
                 std::strerror(errno));
  }
  probe_timer_.ArmPeriodic(probe_interval_);
  Check();
}

void VolumeMonitor::Check() {
  if (probe_worker_.busy()) {
    recheck_ = true;
    // The previous probe is still in the kernel: past the interval, that is a failure.
    if (base::Clock::now() - probe_worker_.started() >= probe_interval_) {
      Health stuck = health_;
      stuck.condition = VolumeCondition::kStuck;
      stuck.detail = absl::StrCat("I/O probe of ", volume_.config().target, " stuck for over ",
                                  base::FormatDuration(probe_interval_));
      OnHealth(stuck);
    }
    return;
  }
  auto probed = std::make_shared<Health>();
  probe_worker_.TryRun(
      [this, probed] {
        Health& h = *probed;
        h.mount = volume_.ReadMountState();
        if (!h.mount.mounted && released_) {
          h.condition = VolumeCondition::kReleased;
          h.detail = absl::StrCat(volume_.config().target, " unmounted on request");
        } else if (!h.mount.mounted) {
          h.condition = VolumeCondition::kUnmounted;
          h.detail = absl::StrCat(volume_.config().target, " is not mounted");
        } else if (h.mount.fs_error) {
          h.condition = VolumeCondition::kFsError;
          h.detail = absl::StrCat("filesystem error: ", volume_.config().device,
                                  " went read-only (", h.mount.fs_options, ")");
        } else if (auto io = ProbeIo(volume_.config().target); !io.ok()) {
          h.condition = VolumeCondition::kFsError;
          h.detail = absl::StrCat("filesystem error: ", io.message());
        } else if (h.mount.read_only) {
          h.condition = VolumeCondition::kReadOnly;
          h.detail = absl::StrCat(volume_.config().target, " is mounted read-only");
        }
        if (auto usage = volume_.Usage(); usage.ok() && h.mount.mounted) {
          h.size_bytes = usage->first;
          h.free_bytes = usage->second;
        }
        return absl::OkStatus();
      },
      [this, probed](absl::Status) {
        OnHealth(std::move(*probed));
        if (std::exchange(recheck_, false)) Check();
      });
}

void VolumeMonitor::OnHealth(Health health) {
  const bool changed = health.condition != health_.condition || health.detail != health_.detail ||
                       health.mount.vfs_options != health_.mount.vfs_options ||
                       health.mount.fs_options != health_.mount.fs_options;
  if (health.condition != health_.condition) {
    if (health.condition == VolumeCondition::kHealthy) {
      spdlog::info("volume {} healthy again", volume_.config().device);
    } else {
      const auto level =
          health.condition == VolumeCondition::kReleased ? spdlog::level::info : spdlog::level::err;
      spdlog::log(level, "volume {}: {}", volume_.config().device, health.detail);
    }
  }
  size_bytes_ = health.size_bytes;
  free_bytes_ = health.free_bytes;
  health_ = std::move(health);
  if (changed) hooks_.changed();
  // A stuck probe cannot be repaired from here (an unmount would hang too), and
  // a volume released by Unmount is not broken.
  const bool repairable = health_.condition != VolumeCondition::kHealthy &&
                          health_.condition != VolumeCondition::kStuck &&
                          health_.condition != VolumeCondition::kReleased;
  if (repairable && !repairing_) {
    repairing_ = true;
    attempts_ = 0;
    Repair();
  }
}

void VolumeMonitor::Repair() {
  const VolumeCondition condition = health_.condition;
  ++attempts_;
  if (condition == VolumeCondition::kReadOnly) {
    spdlog::info("repairing {}: remount read-write (attempt {})", volume_.config().target,
                 attempts_);
    repair_worker_.TryRun([this] { return volume_.RemountReadWrite(); },
                          [this](absl::Status result) {
                            if (!result.ok()) return RepairFailed(std::string(result.message()));
                            FinishRepair(hooks_.repaired_in_place);
                          });
    return;
  }
  spdlog::info("repairing {}: unexport, unmount, check, mount, re-export (attempt {})",
               volume_.config().device, attempts_);
  hooks_.withdraw_export();
  hooks_.changed();
  repair_worker_.TryRun(
      [this] {
        // Let ganesha drop the export (it rereads its config on SIGHUP) before unmounting.
        std::this_thread::sleep_for(milliseconds(200));
        if (auto s = volume_.Unmount(milliseconds(10'000)); !s.ok()) return s;
        if (auto s = volume_.Check(true); !s.ok()) return s;
        return volume_.Mount();
      },
      [this](absl::Status result) {
        if (!result.ok()) return RepairFailed(std::string(result.message()));
        FinishRepair(hooks_.restore_export);
      });
}

void VolumeMonitor::FinishRepair(const std::function<void()>& hook) {
  repairing_ = false;
  hook();
  // Ready() changed with repairing_. The probe that saw the volume healthy
  // again may have finished before this (our own remount fires a mountinfo
  // event), and then no later probe reports a change: re-evaluate here, or
  // readiness waits for the next NFS probe.
  hooks_.changed();
  Check();
}

void VolumeMonitor::RepairFailed(const std::string& error) {
  spdlog::error("repair of {} failed (attempt {}/{}): {}", volume_.config().device, attempts_,
                kMaxRepairAttempts, error);
  if (attempts_ >= kMaxRepairAttempts) {
    hooks_.give_up(absl::StrCat("volume ", volume_.config().device, " could not be repaired after ",
                                attempts_, " attempts: ", error));
    return;
  }
  // A failed in-place remount escalates to the full cycle.
  if (health_.condition == VolumeCondition::kReadOnly)
    health_.condition = VolumeCondition::kFsError;
  retry_timer_.Arm(milliseconds(500 << attempts_));
}

absl::Status VolumeMonitor::Ready() const {
  if (health_.condition != VolumeCondition::kHealthy) {
    return absl::UnavailableError(absl::StrCat("volume ", Name(health_.condition), ": ",
                                               health_.detail, repairing_ ? " (repairing)" : ""));
  }
  if (repairing_) return absl::UnavailableError("volume under repair");
  return absl::OkStatus();
}

void VolumeMonitor::Fill(sharemanager::v1::ShareStatus& status) const {
  status.set_device(volume_.config().device);
  status.set_filesystem(FsName(volume_.config().fs));
  status.set_mount_options(
      health_.mount.mounted ? absl::StrCat(health_.mount.vfs_options, " ", health_.mount.fs_options)
                            : "");
  if (health_.condition == VolumeCondition::kReadOnly ||
      health_.condition == VolumeCondition::kFsError) {
    status.set_read_only(true);
  }
}

void VolumeMonitor::FillUsage(sharemanager::v1::ShareStatus& status) const {
  status.set_size_bytes(size_bytes_);
  status.set_free_bytes(free_bytes_);
}

}  // namespace sharemgr
