// A block-device volume: wait for it, detect and check its filesystem, mount
// it at the export directory with libmount, and the repairs and maintenance
// done on it (remount read-write, unmount with retries, trim, grow). Every
// operation blocks but is bounded in time; callers keep them off the
// supervisor loop. The class is thread-compatible: one thread (the device
// owner's) calls its methods; only RequestStop() may come from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "sharemgr/trim_chunks.h"
#include "supervisor/run_program.h"

namespace sharemgr {

enum class FsType { kExt4, kXfs };

// How far an unattended e2fsck may go (--fsck-mode).
enum class FsckMode {
  kPreen,  // e2fsck -p: only what is safe without a human; stops (exit 4) otherwise
  kYes,    // e2fsck -y: answers yes to everything, including rewriting unreadable blocks
};

// Why a filesystem is checked.
enum class CheckMode {
  kStartup,  // before the first mount: e2fsck -p (or -y); a clean filesystem is skipped
  kRepair,   // after a runtime error: forced, e2fsck -fp (or -fy)
};

const char* FsName(FsType fs);

struct VolumeConfig {
  std::string device;
  FsType fs = FsType::kExt4;
  std::string target;  // the export directory
  std::chrono::milliseconds device_timeout{30'000};
  bool format_if_blank = false;
  FsckMode fsck_mode = FsckMode::kPreen;
  std::vector<std::string> mkfs_options;
  std::vector<std::string> mount_options;
  // Bound for each helper program (mkfs, fsck, resize).
  std::chrono::milliseconds helper_timeout{300'000};
  // A trim's FITRIM covers as many whole allocation units (xfs AGs, ext4
  // block groups) as fit in this, at least one; the deadline is looked at
  // between ranges, so a trim runs past its deadline by one range at most.
  uint64_t trim_chunk_bytes = uint64_t{1} << 30;
};

// What mountinfo says about the export's mount.
struct MountState {
  bool mounted = false;
  std::string source;
  std::string vfs_options;  // per-mount options: "rw,relatime"
  std::string fs_options;   // superblock options: "rw,errors=remount-ro"
  bool read_only = false;   // the mount or the superblock is read-only
  bool fs_error = false;    // the filesystem shut itself down (ext4 emergency_ro)
};

// What a device holds as far as libblkid (superblocks, bad checksums
// included, and partition tables) and ext's backup superblocks tell.
struct DeviceContents {
  std::string fs_type;  // libblkid's TYPE ("ext4", "xfs", "LVM2_member", "swap"), or ""
  // What makes the device not blank, in words ("a gpt partition table",
  // "an ext2/3/4 backup superblock at byte 134217784 ..."); "" when blank.
  std::string found;
  bool blank() const { return found.empty(); }
};

struct ResizeResult {
  uint64_t old_size_bytes = 0;
  uint64_t new_size_bytes = 0;
};

// What mountinfo says about the mount at `target` (any thread; no volume needed).
MountState ReadMountState(const std::string& target);
// The same from mountinfo text (the tests and the fuzz target parse their own).
MountState ParseMountState(const std::string& mountinfo, const std::string& target);
// What statvfs says of a mounted filesystem. Free counts are those an
// unprivileged user may take (f_bavail; inodes: f_favail).
struct FsUsage {
  uint64_t size_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t inodes = 0;
  uint64_t free_inodes = 0;
};
// The usage of the mount at `target` (statvfs).
absl::StatusOr<FsUsage> VolumeUsage(const std::string& target);

// Whether this kernel's xfs trims only the part of a free extent inside a
// FITRIM range (Linux 6.10 and later); before, a range discards in full every
// free extent it overlaps, so the trim's ranges are whole allocation groups.
bool KernelClampsXfsTrimRanges();

class Volume {
 public:
  explicit Volume(VolumeConfig config) : config_(std::move(config)) {}

  // Wait for the device -> detect -> (format) -> check -> mount. Errors say
  // which step failed and why, in words an operator can act on.
  absl::Status Prepare();

  // Thread-safe, from any thread, once for good: WaitForDevice returns at
  // once, a running e2fsck or mkfs gets SIGTERM (never SIGKILL) and the call
  // returns after it exited (CANCELLED, "stopped: ..."); none starts after.
  void RequestStop() const { stop_.Request(); }

  // Interrupted by RequestStop (CANCELLED).
  absl::Status WaitForDevice() const;
  // Whether the device itself answers, to tell a failing device from a
  // damaged filesystem before a repair: its node is a block device, its
  // size is not 0 and a direct 4 KiB read succeeds within 5 s. UNAVAILABLE
  // with the reason otherwise. Bounded even when the read hangs in the kernel.
  absl::Status CheckDevice() const;
  absl::StatusOr<DeviceContents> DetectContents() const;
  // Never SIGKILLed (see RequestStop); a timeout sends SIGTERM and waits.
  absl::Status Format() const;
  // ext4: e2fsck as config().fsck_mode and `mode` say; xfs: nothing (the
  // mount replays its log). Never SIGKILLed, like Format. DATA_LOSS when
  // e2fsck left errors, with its last lines and what the operator can run.
  absl::Status Check(CheckMode mode) const;
  absl::Status Mount() const;
  // Retries "target is busy" with backoff for up to `budget`.
  absl::Status Unmount(std::chrono::milliseconds budget) const;
  absl::Status RemountReadWrite() const;
  MountState ReadMountState() const;
  // FITRIM over the whole filesystem to its real end (its geometry, not
  // statvfs), range by range (TrimInChunks); the bytes trimmed. Past
  // `deadline` it stops between ranges: DEADLINE_EXCEEDED
  // saying how far it got (the filesystem is unchanged apart from what was
  // discarded; the next trim starts over). Before each range `stop` is asked
  // (see TrimStopFn), and RequestStop ends it too (CANCELLED).
  absl::StatusOr<uint64_t> Trim(base::TimePoint deadline, const TrimStopFn& stop) const;
  // Grows the filesystem to the device's size.
  absl::StatusOr<ResizeResult> Resize() const;
  // Filesystem usage (statvfs of the target).
  absl::StatusOr<FsUsage> Usage() const;

  const VolumeConfig& config() const { return config_; }

 private:
  // A filesystem tool (e2fsck, mkfs) that must never be killed: stopped by
  // RequestStop or the helper timeout with SIGTERM only.
  supervisor::ProgramResult RunFilesystemTool(const std::vector<std::string>& argv) const;
  absl::Status RunHelper(const std::vector<std::string>& argv, const char* what) const;

  VolumeConfig config_;
  supervisor::StopSignal stop_;
};

}  // namespace sharemgr
