#include "tests/support/loop_device.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "supervisor/run_program.h"

namespace testing_support {

absl::Status Run(const std::vector<std::string>& argv) {
  const auto result = supervisor::RunProgram(argv, std::chrono::seconds(60));
  if (result.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat(absl::StrJoin(argv, " "), " exited ", result.exit_code, ": ", result.output));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LoopDevice>> LoopDevice::Create(const std::string& size,
                                                               const std::string& fs) {
  std::unique_ptr<LoopDevice> loop(new LoopDevice());
  char tmpl[] = "/tmp/sharemgr-loop-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  loop->dir_ = tmpl;
  loop->image_ = loop->dir_ + "/image";
  if (auto s = Run({"truncate", "-s", size, loop->image_}); !s.ok()) return s;
  if (fs == "ext4") {
    if (auto s = Run({"mkfs.ext4", "-q", "-F", loop->image_}); !s.ok()) return s;
  } else if (fs == "xfs") {
    if (auto s = Run({"mkfs.xfs", "-q", "-f", loop->image_}); !s.ok()) return s;
  }
  const auto attached =
      supervisor::RunProgram({"losetup", "-f", "--show", loop->image_}, std::chrono::seconds(30));
  if (attached.exit_code != 0) return absl::InternalError("losetup: " + attached.output);
  loop->device_ = std::string(absl::StripAsciiWhitespace(attached.output));
  return loop;
}

absl::Status LoopDevice::Grow(const std::string& size) {
  if (auto s = Run({"truncate", "-s", size, image_}); !s.ok()) return s;
  return Run({"losetup", "-c", device_});
}

std::string MountSourceOf(const std::string& target) {
  std::ifstream mounts("/proc/self/mounts");
  std::string source, t, rest;
  while (mounts >> source >> t && std::getline(mounts, rest)) {
    if (t == target) return source;
  }
  return "";
}

std::vector<std::string> MountsUnder(const std::string& dir) {
  std::ifstream mounts("/proc/self/mounts");
  std::string source, target, rest;
  std::vector<std::string> out;
  while (mounts >> source >> target && std::getline(mounts, rest)) {
    if (target == dir || target.starts_with(dir + "/")) out.push_back(target);
  }
  std::sort(out.begin(), out.end(), std::greater<>());  // a child mount sorts after its parent
  return out;
}

// Whether the loop device still serves our image: its number may have been
// reused by another test after a test detached it on purpose.
bool StillOurs(const std::string& device, const std::string& image) {
  std::ifstream backing("/sys/block/" + std::filesystem::path(device).filename().string() +
                        "/loop/backing_file");
  std::string file;
  std::getline(backing, file);
  return file == image;
}

LoopDevice::~LoopDevice() {
  if (!device_.empty() && StillOurs(device_, image_)) {
    // Anything still mounted from this device goes first (a failed test may leave it).
    std::ifstream mounts("/proc/self/mounts");
    std::string source, target, rest;
    std::vector<std::string> targets;
    while (mounts >> source >> target && std::getline(mounts, rest)) {
      if (source == device_) targets.push_back(target);
    }
    for (const auto& t : targets) (void)Run({"umount", "-l", t});
    (void)Run({"losetup", "-d", device_});
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace testing_support
