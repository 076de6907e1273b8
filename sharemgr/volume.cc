#include "sharemgr/volume.h"

#include <blkid/blkid.h>
#include <fcntl.h>
#include <libmount/libmount.h>
#include <linux/fs.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/clock.h"
#include "base/fmt_absl.h"
#include "base/unique_fd.h"
#include "supervisor/run_program.h"

namespace sharemgr {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The last lines of a helper's output, for error messages.
std::string Tail(const std::string& output, size_t lines = 3) {
  std::vector<std::string> all = absl::StrSplit(output, '\n', absl::SkipWhitespace());
  if (all.size() > lines) all.erase(all.begin(), all.end() - static_cast<ptrdiff_t>(lines));
  return absl::StrJoin(all, " | ");
}

bool HasOption(const std::string& options, const std::string& name) {
  for (absl::string_view o : absl::StrSplit(options, ',')) {
    if (o == name) return true;
  }
  return false;
}

// libmount's own message for a failed mount or umount.
std::string MountError(libmnt_context* cxt, int rc) {
  char buf[1024] = {0};
  mnt_context_get_excode(cxt, rc, buf, sizeof(buf));
  return buf[0] != 0 ? std::string(buf) : absl::StrCat("libmount error ", rc);
}

struct ContextDeleter {
  void operator()(libmnt_context* c) const { mnt_free_context(c); }
};
using MountContext = std::unique_ptr<libmnt_context, ContextDeleter>;

}  // namespace

const char* FsName(FsType fs) { return fs == FsType::kExt4 ? "ext4" : "xfs"; }

absl::Status Volume::RunHelper(const std::vector<std::string>& argv, const char* what) const {
  spdlog::info("{}: {}", what, absl::StrJoin(argv, " "));
  const auto result = supervisor::RunProgram(argv, config_.helper_timeout);
  if (result.timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat(what, " did not finish within ", config_.helper_timeout.count() / 1000, " s"));
  }
  if (result.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat(what, " failed (exit ", result.exit_code, "): ", Tail(result.output)));
  }
  return absl::OkStatus();
}

absl::Status Volume::WaitForDevice() const {
  const auto deadline = Clock::now() + config_.device_timeout;
  auto next_log = Clock::now();
  for (;;) {
    struct stat st {};
    if (stat(config_.device.c_str(), &st) == 0) {
      if (S_ISBLK(st.st_mode)) return absl::OkStatus();
      return absl::FailedPreconditionError(
          absl::StrCat("--device ", config_.device, " is not a block device"));
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      return absl::NotFoundError(absl::StrCat("device ", config_.device, " did not appear within ",
                                              base::FormatDuration(config_.device_timeout),
                                              " (--device-timeout)"));
    }
    if (now >= next_log) {
      spdlog::info("waiting for device {} ({} s left)", config_.device,
                   std::chrono::duration_cast<std::chrono::seconds>(deadline - now).count());
      next_log = now + std::chrono::seconds(2);
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
}

absl::StatusOr<std::string> Volume::DetectFilesystem() const {
  blkid_probe probe = blkid_new_probe_from_filename(config_.device.c_str());
  if (probe == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot open ", config_.device, " to detect its filesystem: ", std::strerror(errno)));
  }
  blkid_probe_enable_superblocks(probe, 1);
  blkid_probe_set_superblocks_flags(probe, BLKID_SUBLKS_TYPE);
  const int rc = blkid_do_safeprobe(probe);
  std::string type;
  const char* value = nullptr;
  if (rc == 0 && blkid_probe_lookup_value(probe, "TYPE", &value, nullptr) == 0 && value) {
    type = value;
  }
  blkid_free_probe(probe);
  if (rc == -2) {
    return absl::FailedPreconditionError(absl::StrCat(
        config_.device, " carries more than one filesystem signature; refusing to touch it"));
  }
  if (rc < 0) return absl::UnavailableError(absl::StrCat("cannot probe ", config_.device));
  return type;
}

absl::Status Volume::Format() const {
  std::vector<std::string> argv;
  if (config_.fs == FsType::kExt4) {
    argv = {"mkfs.ext4", "-q", "-F"};
  } else {
    argv = {"mkfs.xfs", "-q", "-f"};
  }
  argv.insert(argv.end(), config_.mkfs_options.begin(), config_.mkfs_options.end());
  argv.push_back(config_.device);
  return RunHelper(argv, "format");
}

absl::Status Volume::Check(bool full) const {
  if (config_.fs == FsType::kXfs) {
    // XFS repairs itself by replaying its log at mount (after a shutdown too);
    // xfs_repair refuses a dirty log and would need -L, which throws away
    // metadata updates: never done unattended.
    (void)full;
    return absl::OkStatus();
  }
  std::vector<std::string> argv = {"e2fsck", full ? "-fy" : "-p", config_.device};
  spdlog::info("checking {}: {}", config_.device, absl::StrJoin(argv, " "));
  const auto result = supervisor::RunProgram(argv, config_.helper_timeout);
  if (result.timed_out) {
    return absl::DeadlineExceededError(absl::StrCat("e2fsck of ", config_.device,
                                                    " did not finish within ",
                                                    config_.helper_timeout.count() / 1000, " s"));
  }
  // e2fsck(8): 0 clean, 1 errors corrected, 2 corrected (reboot advised); 4 and up
  // mean errors left uncorrected or e2fsck itself failed.
  if (result.exit_code >= 0 && (result.exit_code & ~3) == 0) {
    if (result.exit_code != 0) spdlog::warn("e2fsck corrected errors on {}", config_.device);
    return absl::OkStatus();
  }
  if (result.exit_code & 4) {
    return absl::DataLossError(absl::StrCat(
        "filesystem on ", config_.device, " has errors e2fsck -p could not correct (exit ",
        result.exit_code, "); refusing to mount it. Run e2fsck by hand. ", Tail(result.output)));
  }
  return absl::InternalError(absl::StrCat("e2fsck of ", config_.device, " failed (exit ",
                                          result.exit_code, "): ", Tail(result.output)));
}

absl::Status Volume::Mount() const {
  MountContext cxt(mnt_new_context());
  mnt_context_set_source(cxt.get(), config_.device.c_str());
  mnt_context_set_target(cxt.get(), config_.target.c_str());
  mnt_context_set_fstype(cxt.get(), FsName(config_.fs));
  std::vector<std::string> mount_options = config_.mount_options;
  // On an ext4 error, stop writing (and let the probe see emergency_ro) rather
  // than carry on over a damaged filesystem, unless told otherwise.
  if (config_.fs == FsType::kExt4 &&
      std::none_of(mount_options.begin(), mount_options.end(),
                   [](const std::string& o) { return o.starts_with("errors="); })) {
    mount_options.push_back("errors=remount-ro");
  }
  const std::string options = absl::StrJoin(mount_options, ",");
  if (!options.empty()) mnt_context_set_options(cxt.get(), options.c_str());
  const int rc = mnt_context_mount(cxt.get());
  if (rc != 0 || mnt_context_get_status(cxt.get()) != 1) {
    return absl::InternalError(absl::StrCat("mount ", config_.device, " on ", config_.target, ": ",
                                            MountError(cxt.get(), rc)));
  }
  spdlog::info("mounted {} ({}) on {}{}", config_.device, FsName(config_.fs), config_.target,
               options.empty() ? "" : " with " + options);
  return absl::OkStatus();
}

absl::Status Volume::Unmount(milliseconds budget) const {
  const auto deadline = Clock::now() + budget;
  milliseconds backoff(50);
  for (;;) {
    if (!ReadMountState().mounted) return absl::OkStatus();
    MountContext cxt(mnt_new_context());
    mnt_context_set_target(cxt.get(), config_.target.c_str());
    const int rc = mnt_context_umount(cxt.get());
    if (rc == 0 && mnt_context_get_status(cxt.get()) == 1) {
      spdlog::info("unmounted {}", config_.target);
      return absl::OkStatus();
    }
    const bool busy =
        mnt_context_syscall_called(cxt.get()) && mnt_context_get_syscall_errno(cxt.get()) == EBUSY;
    const std::string error = MountError(cxt.get(), rc);
    if (!busy || Clock::now() + backoff > deadline) {
      return absl::UnavailableError(absl::StrCat("unmount ", config_.target, ": ", error));
    }
    spdlog::warn("unmount {}: target is busy; retrying in {} ms", config_.target, backoff.count());
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds(1000));
  }
}

absl::Status Volume::RemountReadWrite() const {
  MountContext cxt(mnt_new_context());
  mnt_context_set_target(cxt.get(), config_.target.c_str());
  mnt_context_set_options(cxt.get(), "remount,rw");
  const int rc = mnt_context_mount(cxt.get());
  if (rc != 0 || mnt_context_get_status(cxt.get()) != 1) {
    return absl::InternalError(
        absl::StrCat("remount ", config_.target, " read-write: ", MountError(cxt.get(), rc)));
  }
  spdlog::info("remounted {} read-write", config_.target);
  return absl::OkStatus();
}

MountState Volume::ReadMountState() const { return sharemgr::ReadMountState(config_.target); }

MountState ReadMountState(const std::string& target) {
  MountState state;
  libmnt_table* table = mnt_new_table_from_file("/proc/self/mountinfo");
  if (table == nullptr) return state;
  if (libmnt_fs* fs = mnt_table_find_target(table, target.c_str(), MNT_ITER_BACKWARD);
      fs != nullptr && mnt_fs_get_target(fs) != nullptr && target == mnt_fs_get_target(fs)) {
    state.mounted = true;
    if (const char* s = mnt_fs_get_source(fs)) state.source = s;
    if (const char* s = mnt_fs_get_vfs_options(fs)) state.vfs_options = s;
    if (const char* s = mnt_fs_get_fs_options(fs)) state.fs_options = s;
    state.fs_error = HasOption(state.fs_options, "emergency_ro");
    state.read_only =
        HasOption(state.vfs_options, "ro") || HasOption(state.fs_options, "ro") || state.fs_error;
  }
  mnt_unref_table(table);
  return state;
}

absl::StatusOr<uint64_t> Volume::Trim() const {
  base::UniqueFd fd(open(config_.target.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd)
    return absl::UnavailableError(
        absl::StrCat("open ", config_.target, ": ", std::strerror(errno)));
  fstrim_range range{};
  range.len = ULLONG_MAX;
  if (ioctl(fd.get(), FITRIM, &range) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("FITRIM on ", config_.target, ": ", std::strerror(errno)));
  }
  return static_cast<uint64_t>(range.len);
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> Volume::Usage() const {
  return VolumeUsage(config_.target);
}

absl::StatusOr<std::pair<uint64_t, uint64_t>> VolumeUsage(const std::string& target) {
  struct statvfs vfs {};
  if (statvfs(target.c_str(), &vfs) != 0) {
    return absl::UnavailableError(absl::StrCat("statvfs ", target, ": ", std::strerror(errno)));
  }
  return std::pair<uint64_t, uint64_t>{static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize,
                                       static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize};
}

absl::StatusOr<ResizeResult> Volume::Resize() const {
  auto before = Usage();
  if (!before.ok()) return before.status();
  const auto status = config_.fs == FsType::kExt4
                          ? RunHelper({"resize2fs", config_.device}, "resize2fs")
                          : RunHelper({"xfs_growfs", config_.target}, "xfs_growfs");
  if (!status.ok() && config_.fs == FsType::kExt4 &&
      std::string(status.message()).find("Permission denied") != std::string::npos) {
    // The kernel's online resize ioctl needs CAP_SYS_RESOURCE.
    return absl::FailedPreconditionError(absl::StrCat(
        "growing ext4 online needs the CAP_SYS_RESOURCE capability, which share-manager lacks "
        "(grant it to the container); the filesystem is unchanged. ",
        status.message()));
  }
  if (!status.ok()) return status;
  auto after = Usage();
  if (!after.ok()) return after.status();
  return ResizeResult{.old_size_bytes = before->first, .new_size_bytes = after->first};
}

absl::Status Volume::Prepare() {
  if (auto s = WaitForDevice(); !s.ok()) return s;
  auto type = DetectFilesystem();
  if (!type.ok()) return type.status();
  if (type->empty()) {
    if (!config_.format_if_blank) {
      return absl::FailedPreconditionError(absl::StrCat(
          config_.device, " has no filesystem; refusing to format it without --format-if-blank"));
    }
    spdlog::info("{} is blank: formatting as {}", config_.device, FsName(config_.fs));
    if (auto s = Format(); !s.ok()) return s;
  } else if (*type != FsName(config_.fs)) {
    return absl::FailedPreconditionError(
        absl::StrCat(config_.device, " holds a ", *type, " filesystem but --fs is ",
                     FsName(config_.fs), "; refusing to mount it"));
  }
  if (auto s = Check(false); !s.ok()) return s;
  if (ReadMountState().mounted) {
    spdlog::warn("{} is already mounted; unmounting it first", config_.target);
    if (auto s = Unmount(milliseconds(10'000)); !s.ok()) return s;
  }
  return Mount();
}

}  // namespace sharemgr
