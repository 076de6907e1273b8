#include "sharemgr/volume_monitor.h"

#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
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

VolumeMonitor::VolumeMonitor(supervisor::EventLoop& loop, VolumeOwner& owner, VolumeConfig volume,
                             base::Duration probe_interval, VolumeHooks hooks)
    : loop_(loop),
      owner_(owner),
      volume_(std::move(volume)),
      probe_interval_(probe_interval),
      hooks_(std::move(hooks)),
      probe_timer_(loop, [this] { Check(); }),
      probe_worker_(loop) {}

VolumeMonitor::~VolumeMonitor() {
  *alive_ = false;
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

void VolumeMonitor::Stop() {
  stopped_ = true;
  probe_timer_.Disarm();
  if (mountinfo_token_ != 0) loop_.Unwatch(mountinfo_token_);
  mountinfo_token_ = 0;
}

VolumeOwner::Done VolumeMonitor::OnLoop(std::function<void(absl::Status)> done) {
  return [&loop = loop_, alive = alive_, done = std::move(done)](absl::Status result) {
    loop.Post([alive, done, result = std::move(result)] {
      if (*alive) done(result);
    });
  };
}

void VolumeMonitor::Check() {
  // Only a mounted volume is probed: the owner knows why it is not mounted
  // (released by Unmount, under repair, failed, stopping).
  if (stopped_) return;
  const VolumeState state = owner_.Snapshot().state;
  if (state == VolumeState::kReleased && health_.condition != VolumeCondition::kReleased) {
    Health released;
    released.condition = VolumeCondition::kReleased;
    released.detail = absl::StrCat(volume_.target, " unmounted on request");
    OnHealth(std::move(released));
  }
  if (state != VolumeState::kMounted || repair_requested_) return;
  if (probe_worker_.busy()) {
    recheck_ = true;
    // The previous probe is still in the kernel: past the interval, that is a failure.
    if (base::Clock::now() - probe_worker_.started() >= probe_interval_) {
      Health stuck = health_;
      stuck.condition = VolumeCondition::kStuck;
      stuck.detail = absl::StrCat("I/O probe of ", volume_.target, " stuck for over ",
                                  base::FormatDuration(probe_interval_));
      OnHealth(stuck);
    }
    return;
  }
  // The task owns copies of what it reads: nothing of the monitor's.
  auto probed = std::make_shared<Health>();
  probe_worker_.TryRun(
      [probed, volume = volume_] {
        Health& h = *probed;
        h.mount = ReadMountState(volume.target);
        if (!h.mount.mounted) {
          h.condition = VolumeCondition::kUnmounted;
          h.detail = absl::StrCat(volume.target, " is not mounted");
        } else if (h.mount.fs_error) {
          h.condition = VolumeCondition::kFsError;
          h.detail = absl::StrCat("filesystem error: ", volume.device, " went read-only (",
                                  h.mount.fs_options, ")");
        } else if (auto io = ProbeIo(volume.target); !io.ok()) {
          h.condition = VolumeCondition::kFsError;
          h.detail = absl::StrCat("filesystem error: ", io.message());
        } else if (h.mount.read_only) {
          h.condition = VolumeCondition::kReadOnly;
          h.detail = absl::StrCat(volume.target, " is mounted read-only");
        }
        if (auto usage = VolumeUsage(volume.target); usage.ok() && h.mount.mounted) {
          h.usage = *usage;
        }
        return absl::OkStatus();
      },
      [this, probed, repairs = repairs_](absl::Status) {
        // A probe that raced an Unmount or a repair saw a volume in transit:
        // one that read mountinfo before a repair finished would ask for the
        // same repair again (one event, two remount generations).
        if (stopped_) return;
        const bool stale = repairs != repairs_;
        if (!stale && owner_.Snapshot().state == VolumeState::kMounted && !repair_requested_) {
          OnHealth(std::move(*probed));
        }
        if (std::exchange(recheck_, false) || stale) Check();
      });
}

void VolumeMonitor::OnHealth(Health health) {
  const bool changed = health.condition != health_.condition || health.detail != health_.detail ||
                       health.mount.vfs_options != health_.mount.vfs_options ||
                       health.mount.fs_options != health_.mount.fs_options;
  if (health.condition != health_.condition) {
    if (health.condition == VolumeCondition::kHealthy) {
      spdlog::info("volume {} healthy again", volume_.device);
    } else {
      const auto level =
          health.condition == VolumeCondition::kReleased ? spdlog::level::info : spdlog::level::err;
      spdlog::log(level, "volume {}: {}", volume_.device, health.detail);
    }
  }
  const auto read_only = [](VolumeCondition c) {
    return c == VolumeCondition::kReadOnly || c == VolumeCondition::kFsError;
  };
  if (read_only(health.condition) && !read_only(health_.condition) && hooks_.turned_read_only) {
    hooks_.turned_read_only();
  }
  size_bytes_ = health.usage ? health.usage->size_bytes : 0;
  free_bytes_ = health.usage ? health.usage->free_bytes : 0;
  if (health.usage && hooks_.usage) hooks_.usage(*health.usage);
  health_ = std::move(health);
  if (changed) hooks_.changed();
  // A stuck probe cannot be repaired from here (an unmount would hang too), and
  // a volume released by Unmount is not broken.
  const bool repairable = health_.condition != VolumeCondition::kHealthy &&
                          health_.condition != VolumeCondition::kStuck &&
                          health_.condition != VolumeCondition::kReleased;
  if (repairable && !repair_requested_) Repair();
}

void VolumeMonitor::Repair() {
  repair_requested_ = true;
  ++repairs_;
  repair_started_ = base::Clock::now();
  if (health_.condition == VolumeCondition::kReadOnly) {
    spdlog::info("repairing {}: remount read-write", volume_.target);
    owner_.RepairInPlace(health_.detail,
                         OnLoop([this](absl::Status result) { OnRepairDone(true, result); }));
    return;
  }
  RepairFull();
}

void VolumeMonitor::RepairFull() {
  spdlog::info("repairing {}: unexport, then check the device, unmount, check, mount, re-export",
               volume_.device);
  repair_started_ = base::Clock::now();
  hooks_.withdraw_export();
  hooks_.changed();
  owner_.RepairFull(health_.detail,
                    OnLoop([this](absl::Status result) { OnRepairDone(false, result); }));
}

void VolumeMonitor::OnRepairDone(bool in_place, const absl::Status& result) {
  const VolumeState state = owner_.Snapshot().state;
  if (state == VolumeState::kStopping) return;
  if (!result.ok()) {
    // A failed in-place remount escalates to the full cycle; a failed full
    // repair (or a spent repair budget) ends the share.
    if (in_place && state == VolumeState::kMounted) {
      ReportRepair(in_place, RepairOutcome::kFailed);
      return RepairFull();
    }
    repair_requested_ = false;
    if (state == VolumeState::kFailed) {
      ReportRepair(in_place, RepairOutcome::kFailed);
      hooks_.give_up(owner_.Snapshot().detail);
    } else {
      ReportRepair(in_place, RepairOutcome::kNotRun);
      // Not run (released by Unmount meanwhile): the export was withdrawn for
      // nothing; it comes back as it was.
      spdlog::warn("repair of {} not run: {}", volume_.device, result.message());
      if (!in_place) hooks_.restore_export(false);
      hooks_.changed();
    }
    return;
  }
  repair_requested_ = false;
  ReportRepair(in_place, RepairOutcome::kOk);
  // The repair made the volume healthy; the next probe confirms it.
  health_.condition = VolumeCondition::kHealthy;
  health_.detail.clear();
  if (in_place) {
    hooks_.repaired_in_place();
  } else {
    hooks_.restore_export(true);
  }
  // Ready() changed. The probe that saw the volume healthy again may have
  // finished before this (our own remount fires a mountinfo event), and then
  // no later probe reports a change: re-evaluate here, or readiness waits for
  // the next NFS probe.
  hooks_.changed();
  Check();
}

void VolumeMonitor::ReportRepair(bool in_place, RepairOutcome outcome) const {
  if (hooks_.repaired) {
    hooks_.repaired(in_place ? RepairKind::kRemount : RepairKind::kFull, outcome,
                    base::Clock::now() - repair_started_);
  }
}

absl::Status VolumeMonitor::Ready() const {
  const VolumeSnapshot owner = owner_.Snapshot();
  if (owner.state == VolumeState::kRepairing) {
    return absl::UnavailableError(
        absl::StrCat("repairing the volume: ", owner.repair ? owner.repair->what : owner.detail));
  }
  if (owner.state == VolumeState::kFailed) {
    return absl::UnavailableError(absl::StrCat("volume failed: ", owner.detail));
  }
  if (health_.condition != VolumeCondition::kHealthy) {
    return absl::UnavailableError(absl::StrCat("volume ", Name(health_.condition), ": ",
                                               health_.detail,
                                               repair_requested_ ? " (repair requested)" : ""));
  }
  if (repair_requested_) return absl::UnavailableError("volume under repair");
  return absl::OkStatus();
}

void VolumeMonitor::Fill(sharemanager::v1::ShareStatus& status) const {
  status.set_device(volume_.device);
  status.set_filesystem(FsName(volume_.fs));
  status.set_mount_options(
      health_.mount.mounted ? absl::StrCat(health_.mount.vfs_options, " ", health_.mount.fs_options)
                            : "");
  // Set both ways: the published status is edited in place, so a flag only
  // ever set would stay true after the repair.
  status.set_read_only(health_.condition == VolumeCondition::kReadOnly ||
                       health_.condition == VolumeCondition::kFsError);
}

void VolumeMonitor::FillUsage(sharemanager::v1::ShareStatus& status) const {
  status.set_size_bytes(size_bytes_);
  status.set_free_bytes(free_bytes_);
}

}  // namespace sharemgr
