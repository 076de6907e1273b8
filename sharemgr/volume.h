// A block-device volume: wait for it, detect and check its filesystem, mount
// it at the export directory with libmount, and the repairs and maintenance
// done on it (remount read-write, unmount with retries, trim, grow). Every
// operation blocks but is bounded in time; callers keep them off the
// supervisor loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sharemgr {

enum class FsType { kExt4, kXfs };

const char* FsName(FsType fs);

struct VolumeConfig {
  std::string device;
  FsType fs = FsType::kExt4;
  std::string target;  // the export directory
  std::chrono::milliseconds device_timeout{30'000};
  bool format_if_blank = false;
  std::vector<std::string> mkfs_options;
  std::vector<std::string> mount_options;
  // Bound for each helper program (mkfs, fsck, resize).
  std::chrono::milliseconds helper_timeout{300'000};
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

struct ResizeResult {
  uint64_t old_size_bytes = 0;
  uint64_t new_size_bytes = 0;
};

// What mountinfo says about the mount at `target` (any thread; no volume needed).
MountState ReadMountState(const std::string& target);
// Filesystem size and free bytes of the mount at `target` (statvfs).
absl::StatusOr<std::pair<uint64_t, uint64_t>> VolumeUsage(const std::string& target);

class Volume {
 public:
  explicit Volume(VolumeConfig config) : config_(std::move(config)) {}

  // Wait for the device -> detect -> (format) -> check -> mount. Errors say
  // which step failed and why, in words an operator can act on.
  absl::Status Prepare();

  absl::Status WaitForDevice() const;
  // "" for a blank device.
  absl::StatusOr<std::string> DetectFilesystem() const;
  absl::Status Format() const;
  // ext4: e2fsck -p (full: -fy); xfs: nothing (the mount replays its log).
  absl::Status Check(bool full) const;
  absl::Status Mount() const;
  // Retries "target is busy" with backoff for up to `budget`.
  absl::Status Unmount(std::chrono::milliseconds budget) const;
  absl::Status RemountReadWrite() const;
  MountState ReadMountState() const;
  // FITRIM over the whole filesystem; the bytes trimmed.
  absl::StatusOr<uint64_t> Trim() const;
  // Grows the filesystem to the device's size.
  absl::StatusOr<ResizeResult> Resize() const;
  // Filesystem size and free bytes (statvfs of the target).
  absl::StatusOr<std::pair<uint64_t, uint64_t>> Usage() const;

  const VolumeConfig& config() const { return config_; }

 private:
  absl::Status RunHelper(const std::vector<std::string>& argv, const char* what) const;

  VolumeConfig config_;
};

}  // namespace sharemgr
