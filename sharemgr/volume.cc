#include "sharemgr/volume.h"

#include <blkid/blkid.h>
#include <ext2fs/ext2fs.h>
#include <fcntl.h>
#include <libmount/libmount.h>
#include <linux/fs.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <xfs/xfs.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/byte_size.h"
#include "base/clock.h"
#include "base/fmt_absl.h"
#include "base/unique_fd.h"
#include "sharemgr/trim_chunks.h"
#include "supervisor/run_program.h"

namespace sharemgr {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using supervisor::ProgramResult;

// How long a healthy device may take to answer one 4 KiB read.
constexpr milliseconds kDeviceReadDeadline(5000);

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

// The error for a filesystem tool that a stop request or its time limit
// ended (with SIGTERM, never SIGKILL) before it succeeded.
absl::Status EndedEarly(const std::string& what, const ProgramResult& result, milliseconds limit,
                        absl::string_view what_next) {
  const std::string exit = result.exit_code >= 0 ? absl::StrCat("exit ", result.exit_code)
                                                 : std::string("it did not start");
  if (result.stopped) {
    return absl::CancelledError(
        absl::StrCat("stopped: ", what, " interrupted (", exit, "); ", what_next));
  }
  return absl::DeadlineExceededError(
      absl::StrCat(what, " did not finish within ", base::FormatDuration(limit),
                   "; stopped it with SIGTERM (", exit, "); ", what_next));
}

// ext2/3/4 keep a copy of the superblock at the start of block group 1, for
// each block size at its own place; it survives a damaged primary superblock.
struct ExtBackup {
  uint64_t block_size;
  uint64_t block;
};
constexpr ExtBackup kExtBackups[] = {{1024, 8193}, {2048, 16384}, {4096, 32768}};
constexpr uint64_t kExtMagicOffset = 0x38;  // s_magic, little-endian 0xEF53

// What the first ext backup superblock found says, or "" when none is there.
absl::StatusOr<std::string> FindExtBackupSuperblock(const std::string& device) {
  base::UniqueFd fd(open(device.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    return absl::UnavailableError(absl::StrCat(
        "cannot open ", device, " to look for ext backup superblocks: ", std::strerror(errno)));
  }
  for (const auto& backup : kExtBackups) {
    const uint64_t at = backup.block * backup.block_size;
    unsigned char magic[2] = {0, 0};
    const ssize_t n =
        pread(fd.get(), magic, sizeof(magic), static_cast<off_t>(at + kExtMagicOffset));
    if (n < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot read ", device, " at byte ", at, ": ", std::strerror(errno)));
    }
    if (n == 2 && magic[0] == 0x53 && magic[1] == 0xEF) {
      return absl::StrCat("ext2/3/4 backup superblock at byte ", at,
                          " (its primary superblock is damaged; e2fsck -b ", backup.block, " -B ",
                          backup.block_size, " ", device, " repairs it from the backup)");
    }
  }
  return std::string();
}

struct ContextDeleter {
  void operator()(libmnt_context* c) const { mnt_free_context(c); }
};
using MountContext = std::unique_ptr<libmnt_context, ContextDeleter>;

}  // namespace

const char* FsName(FsType fs) { return fs == FsType::kExt4 ? "ext4" : "xfs"; }

ProgramResult Volume::RunFilesystemTool(const std::vector<std::string>& argv) const {
  if (!stop_.requested()) spdlog::info("running {}", absl::StrJoin(argv, " "));
  return supervisor::RunProgram(argv, {.timeout = config_.helper_timeout,
                                       .at_timeout = supervisor::AtTimeout::kTerminate,
                                       .stop = &stop_});
}

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
    // Sleeps 100 ms unless a stop is requested meanwhile.
    pollfd stop{stop_.fd(), POLLIN, 0};
    if (poll(&stop, 1, 100) == 1) {
      return absl::CancelledError(
          absl::StrCat("stopped while waiting for device ", config_.device, " to appear"));
    }
  }
}

absl::Status Volume::CheckDevice() const {
  const std::string& device = config_.device;
  struct stat st {};
  if (stat(device.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::UnavailableError(absl::StrCat("device ", device, " is gone"));
    return absl::UnavailableError(absl::StrCat("device ", device, ": ", std::strerror(errno)));
  }
  if (!S_ISBLK(st.st_mode)) {
    return absl::UnavailableError(absl::StrCat("device ", device, " is not a block device"));
  }
  {
    base::UniqueFd fd(open(device.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
      return absl::UnavailableError(
          absl::StrCat("device ", device,
                       errno == ENXIO || errno == ENODEV ? " is gone: " : " cannot be opened: ",
                       std::strerror(errno)));
    }
    uint64_t size = 0;
    if (ioctl(fd.get(), BLKGETSIZE64, &size) != 0) {
      return absl::UnavailableError(
          absl::StrCat("device ", device, ": BLKGETSIZE64: ", std::strerror(errno)));
    }
    if (size == 0) return absl::UnavailableError(absl::StrCat("device ", device, " has size 0"));
  }
  // In a helper process: a read stuck in the kernel holds dd, not the caller.
  const auto read = supervisor::RunProgram(
      {"dd", "if=" + device, "of=/dev/null", "bs=4096", "count=1", "iflag=direct"},
      kDeviceReadDeadline);
  if (read.timed_out) {
    return absl::UnavailableError(absl::StrCat("device ", device,
                                               " did not answer a 4 KiB read within ",
                                               base::FormatDuration(kDeviceReadDeadline)));
  }
  if (read.exit_code == -1) {
    return absl::InternalError(absl::StrCat("cannot run dd to read ", device, ": ", read.output));
  }
  if (read.exit_code != 0) {
    return absl::UnavailableError(
        absl::StrCat("device ", device, " returns I/O errors: ", Tail(read.output)));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceContents> Volume::DetectContents() const {
  blkid_probe probe = blkid_new_probe_from_filename(config_.device.c_str());
  if (probe == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot open ", config_.device,
                                               " to detect its contents: ", std::strerror(errno)));
  }
  // Superblocks alone call a partitioned disk blank; and a superblock with a
  // bad checksum is still somebody's data.
  blkid_probe_enable_superblocks(probe, 1);
  blkid_probe_set_superblocks_flags(probe,
                                    BLKID_SUBLKS_TYPE | BLKID_SUBLKS_USAGE | BLKID_SUBLKS_BADCSUM);
  blkid_probe_enable_partitions(probe, 1);
  const int rc = blkid_do_safeprobe(probe);
  auto lookup = [&](const char* name) {
    const char* value = nullptr;
    return rc == 0 && blkid_probe_lookup_value(probe, name, &value, nullptr) == 0 && value
               ? std::string(value)
               : std::string();
  };
  DeviceContents contents;
  contents.fs_type = lookup("TYPE");
  const std::string usage = lookup("USAGE");
  const std::string pttype = lookup("PTTYPE");
  const bool bad_checksum = lookup("SBBADCSUM") == "1";
  blkid_free_probe(probe);
  if (rc == -2) {
    return absl::FailedPreconditionError(absl::StrCat(
        config_.device, " carries more than one filesystem signature; refusing to touch it"));
  }
  if (rc < 0) return absl::UnavailableError(absl::StrCat("cannot probe ", config_.device));
  std::vector<std::string> found;
  if (!pttype.empty()) found.push_back(absl::StrCat(pttype, " partition table"));
  if (!contents.fs_type.empty()) {
    found.push_back(absl::StrCat(
        contents.fs_type,
        usage == "filesystem" || usage.empty() ? " filesystem" : " " + usage + " signature",
        bad_checksum ? " (with a bad superblock checksum)" : ""));
  }
  if (rc == 0 && found.empty()) found.push_back("signature libblkid cannot name");
  if (found.empty()) {
    auto backup = FindExtBackupSuperblock(config_.device);
    if (!backup.ok()) return backup.status();
    if (!backup->empty()) found.push_back(*std::move(backup));
  }
  contents.found = absl::StrJoin(found, " and a ");
  return contents;
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
  const auto result = RunFilesystemTool(argv);
  if (result.exit_code == 0) return absl::OkStatus();
  if (result.stopped || result.timed_out) {
    return EndedEarly(argv[0], result, config_.helper_timeout,
                      "the device may hold a partial filesystem");
  }
  return absl::InternalError(
      absl::StrCat(argv[0], " failed (exit ", result.exit_code, "): ", Tail(result.output)));
}

absl::Status Volume::Check(CheckMode mode) const {
  if (config_.fs == FsType::kXfs) {
    // XFS repairs itself by replaying its log at mount (after a shutdown too);
    // xfs_repair refuses a dirty log and would need -L, which throws away
    // metadata updates: never done unattended.
    return absl::OkStatus();
  }
  const bool yes = config_.fsck_mode == FsckMode::kYes;
  const std::string flags =
      absl::StrCat("-", mode == CheckMode::kRepair ? "f" : "", yes ? "y" : "p");
  const auto result = RunFilesystemTool({"e2fsck", flags, config_.device});
  // e2fsck(8): 0 clean, 1 errors corrected, 2 corrected (reboot advised); 4 and up
  // mean errors left uncorrected or e2fsck itself failed.
  if (result.exit_code >= 0 && (result.exit_code & ~3) == 0) {
    if (result.exit_code != 0) spdlog::warn("e2fsck corrected errors on {}", config_.device);
    return absl::OkStatus();
  }
  if (result.stopped || result.timed_out) {
    return EndedEarly(absl::StrCat("e2fsck of ", config_.device), result, config_.helper_timeout,
                      "the next start checks again");
  }
  if (result.exit_code & 4) {
    const std::string what_next =
        yes ? absl::StrCat("Back up the device, then repair it by hand (e2fsck -fy ",
                           config_.device, " interactively, debugfs) or restore it from a backup.")
            : absl::StrCat("To repair it: back up the device, then run e2fsck -fy ", config_.device,
                           ", or restart share-manager with --fsck-mode=yes.");
    return absl::DataLossError(absl::StrCat(
        "filesystem on ", config_.device, " has errors e2fsck ", flags, " could not correct (exit ",
        result.exit_code, "); refusing to mount it. e2fsck said: ", Tail(result.output, 5), ". ",
        what_next));
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

namespace {

MountState StateIn(libmnt_table* table, const std::string& target) {
  MountState state;
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
  return state;
}

}  // namespace

MountState ReadMountState(const std::string& target) {
  libmnt_table* table = mnt_new_table_from_file("/proc/self/mountinfo");
  if (table == nullptr) return {};
  MountState state = StateIn(table, target);
  mnt_unref_table(table);
  return state;
}

MountState ParseMountState(const std::string& mountinfo, const std::string& target) {
  MountState state;
  libmnt_table* table = mnt_new_table();
  if (table == nullptr) return state;
  // fmemopen only reads here ("r"), whatever its prototype says.
  if (FILE* f = fmemopen(const_cast<char*>(mountinfo.data()), mountinfo.size(), "r")) {
    // Named as the real file, so libmount parses it as mountinfo.
    if (mnt_table_parse_stream(table, f, "/proc/self/mountinfo") == 0) {
      state = StateIn(table, target);
    }
    fclose(f);
  }
  mnt_unref_table(table);
  return state;
}

namespace {

// Where a trim ends and how much one FITRIM covers. A range is whole
// allocation units, as many as fit in `chunk_bytes`, at least one: ext4's
// block groups (clusters counted for bigalloc: ext4 before 5.19 marks a group
// trimmed after a part of it); xfs's allocation groups on kernels before 6.10,
// which discard in full every free extent a range merely overlaps (its free
// extents span up to an AG, often a quarter of the filesystem), its blocks on
// later ones, which clamp each extent to the range. The end is the
// filesystem's real size: statvfs leaves its metadata out, and a project
// quota on the root makes it report the quota.
struct TrimGeometry {
  uint64_t total_bytes = 0;
  uint64_t range_bytes = 0;
};

TrimGeometry InUnits(uint64_t total_bytes, uint64_t unit_bytes, uint64_t chunk_bytes) {
  return {.total_bytes = total_bytes,
          .range_bytes = std::max<uint64_t>(1, chunk_bytes / unit_bytes) * unit_bytes};
}

absl::StatusOr<TrimGeometry> ReadTrimGeometry(const VolumeConfig& config, int target_fd) {
  if (config.fs == FsType::kXfs) {
    // V1: every kernel has it, and it holds what is needed here.
    struct xfs_fsop_geom_v1 geometry {};
    if (ioctl(target_fd, XFS_IOC_FSGEOMETRY_V1, &geometry) != 0) {
      return absl::UnavailableError(
          absl::StrCat("XFS_IOC_FSGEOMETRY on ", config.target, ": ", std::strerror(errno)));
    }
    const uint64_t unit = KernelClampsXfsTrimRanges()
                              ? geometry.blocksize
                              : uint64_t{geometry.agblocks} * geometry.blocksize;
    return InUnits(geometry.datablocks * geometry.blocksize, unit, config.trim_chunk_bytes);
  }
  // libext2fs' messages for its own codes (it only registers them in its tools).
  static std::once_flag ext2_errors;
  std::call_once(ext2_errors, [] { initialize_ext2_error_table(); });
  // The superblock only, read-only, as dumpe2fs -h reads a mounted ext4,
  // through a descriptor of ours: libext2fs opens without O_CLOEXEC, and a
  // ganesha started meanwhile would keep the device open for its life.
  const int device_fd = open(config.device.c_str(), O_RDONLY | O_CLOEXEC);
  if (device_fd < 0) {
    return absl::UnavailableError(absl::StrCat("open ", config.device, ": ", std::strerror(errno)));
  }
  ext2_filsys fs = nullptr;
  // unixfd_io_manager closes `device_fd` with the filesystem, or when the open fails.
  if (const errcode_t rc = ext2fs_open(std::to_string(device_fd).c_str(),
                                       EXT2_FLAG_64BITS | EXT2_FLAG_SUPER_ONLY |
                                           EXT2_FLAG_SKIP_MMP | EXT2_FLAG_IGNORE_CSUM_ERRORS,
                                       0, 0, unixfd_io_manager, &fs);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("reading the ext4 superblock of ", config.device, ": ", error_message(rc)));
  }
  const ext2_super_block* super = fs->super;
  const uint64_t group_bytes = uint64_t{super->s_clusters_per_group}
                               << (EXT2_MIN_BLOCK_LOG_SIZE + super->s_log_cluster_size);
  const uint64_t total_bytes =
      ext2fs_blocks_count(fs->super) * static_cast<uint64_t>(fs->blocksize);
  ext2fs_close_free(&fs);
  return InUnits(total_bytes, group_bytes, config.trim_chunk_bytes);
}

}  // namespace

bool KernelClampsXfsTrimRanges() {
  struct utsname name {};
  int major = 0;
  int minor = 0;
  if (uname(&name) != 0 || std::sscanf(name.release, "%d.%d", &major, &minor) != 2) return false;
  return std::pair(major, minor) >= std::pair(6, 10);
}

absl::StatusOr<uint64_t> Volume::Trim(base::TimePoint deadline, const TrimStopFn& stop) const {
  base::UniqueFd fd(open(config_.target.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd)
    return absl::UnavailableError(
        absl::StrCat("open ", config_.target, ": ", std::strerror(errno)));
  auto geometry = ReadTrimGeometry(config_, fd.get());
  if (!geometry.ok()) return geometry.status();
  spdlog::info("volume {}: trimming {} in ranges of {}", config_.device,
               base::FormatBytes(geometry->total_bytes), base::FormatBytes(geometry->range_bytes));
  auto trimmed = TrimInChunks(
      geometry->total_bytes, geometry->range_bytes, deadline, base::SteadyClock(),
      [&] {
        // The owner's reason first: a fence also stops the volume, and says why.
        if (auto may = stop(); !may.ok()) return may;
        if (stop_.requested()) return absl::UnavailableError("stopped: share-manager is stopping");
        return absl::OkStatus();
      },
      [&](uint64_t start, uint64_t len) -> absl::StatusOr<uint64_t> {
        fstrim_range range{.start = start, .len = len, .minlen = 0};
        if (ioctl(fd.get(), FITRIM, &range) != 0) {
          return absl::FailedPreconditionError(absl::StrCat(
              "FITRIM on ", config_.target, " at byte ", start, ": ", std::strerror(errno)));
        }
        return static_cast<uint64_t>(range.len);  // the kernel leaves the bytes trimmed here
      });
  if (!trimmed.ok()) spdlog::warn("volume {}: {}", config_.device, trimmed.status().message());
  return trimmed;
}

absl::StatusOr<FsUsage> Volume::Usage() const { return VolumeUsage(config_.target); }

absl::StatusOr<FsUsage> VolumeUsage(const std::string& target) {
  struct statvfs vfs {};
  if (statvfs(target.c_str(), &vfs) != 0) {
    return absl::UnavailableError(absl::StrCat("statvfs ", target, ": ", std::strerror(errno)));
  }
  return FsUsage{.size_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize,
                 .free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize,
                 .inodes = static_cast<uint64_t>(vfs.f_files),
                 .free_inodes = static_cast<uint64_t>(vfs.f_favail)};
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
  return ResizeResult{.old_size_bytes = before->size_bytes, .new_size_bytes = after->size_bytes};
}

absl::Status Volume::Prepare() {
  if (auto s = WaitForDevice(); !s.ok()) return s;
  auto contents = DetectContents();
  if (!contents.ok()) return contents.status();
  if (contents->blank()) {
    if (!config_.format_if_blank) {
      return absl::FailedPreconditionError(absl::StrCat(
          config_.device, " has no filesystem; refusing to format it without --format-if-blank"));
    }
    spdlog::info("{} is blank: formatting as {}", config_.device, FsName(config_.fs));
    if (auto s = Format(); !s.ok()) return s;
  } else if (contents->fs_type != FsName(config_.fs)) {
    // Anything at all on it is somebody's data: never formatted, never mounted.
    return absl::FailedPreconditionError(absl::StrCat(
        config_.device, " holds a ", contents->found, " but --fs is ", FsName(config_.fs),
        config_.format_if_blank
            ? "; refusing to format or mount it (--format-if-blank formats only a device "
              "without any signature)"
            : "; refusing to mount it"));
  }
  // A mount left by a previous run goes before the check: e2fsck refuses a
  // mounted filesystem.
  if (ReadMountState().mounted) {
    spdlog::warn("{} is already mounted; unmounting it first", config_.target);
    if (auto s = Unmount(milliseconds(10'000)); !s.ok()) return s;
  }
  if (auto s = Check(CheckMode::kStartup); !s.ok()) return s;
  if (stop_.requested()) {
    return absl::CancelledError(absl::StrCat("stopped before mounting ", config_.device));
  }
  return Mount();
}

}  // namespace sharemgr
