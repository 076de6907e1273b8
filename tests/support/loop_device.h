// A real loop device over a sparse image file for volume tests: optionally
// formatted, detached (and unmounted if needed) on destruction, pass or fail.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace testing_support {

class LoopDevice {
 public:
  // size like "64M"; fs "ext4", "xfs" or "" (blank).
  static absl::StatusOr<std::unique_ptr<LoopDevice>> Create(const std::string& size,
                                                            const std::string& fs);
  ~LoopDevice();
  LoopDevice(const LoopDevice&) = delete;
  LoopDevice& operator=(const LoopDevice&) = delete;

  const std::string& path() const { return device_; }
  const std::string& image() const { return image_; }
  // Grows the image and tells the kernel (losetup -c).
  absl::Status Grow(const std::string& size);

 private:
  LoopDevice() = default;
  std::string dir_, image_, device_;
};

// What is mounted at `target` ("" when nothing is), from /proc/self/mounts.
std::string MountSourceOf(const std::string& target);

// Every mount point at or under `dir`, deepest first (to unmount in order).
std::vector<std::string> MountsUnder(const std::string& dir);

// Runs a command; an error with its output unless it exits 0.
absl::Status Run(const std::vector<std::string>& argv);

}  // namespace testing_support
