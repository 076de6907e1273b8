#include "sharemgr/share.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "base/fmt_absl.h"

namespace sharemgr {
Share::Share(GaneshaConfig config, std::string config_path, std::function<void()> reload)
    : config_(std::move(config)),
      config_path_(std::move(config_path)),
      reload_(std::move(reload)) {}

absl::Status Share::WriteConfig() const {
  // Rendered anew at every start, and written on the loop thread: atomic for
  // ganesha's reread, without an fsync that a slow disk could stall.
  return base::WriteFileAtomically(
      config_path_, config_.Render(exported_ && volume_available_ && fenced_.empty()), 0600,
      base::Durability::kReplaced);
}

void Share::SetVolumeAvailable(bool available) {
  if (volume_available_ == available) return;
  volume_available_ = available;
  if (auto status = WriteConfig(); !status.ok()) {
    spdlog::error("cannot rewrite ganesha.conf: {}", status.message());
  }
  spdlog::info("export {} {} ganesha during the volume repair", config_.pseudo_path(),
               available ? "given back to" : "withdrawn from");
  reload_();
}

void Share::Fence(const std::string& why) {
  if (!fenced_.empty()) return;
  fenced_ = why;
  if (auto status = WriteConfig(); !status.ok()) {
    spdlog::error("cannot rewrite ganesha.conf: {}", status.message());
  }
  spdlog::error("export {} withdrawn for good: {}", config_.pseudo_path(), why);
  reload_();
}

void Share::CountRemount() {
  if (generation_ < std::numeric_limits<uint64_t>::max()) ++generation_;
  if (repairs_ < std::numeric_limits<uint32_t>::max()) ++repairs_;
  spdlog::info("volume repaired: remount generation {}", generation_);
}

absl::Status Share::CheckReady() {
  if (!fenced_.empty()) return absl::UnavailableError(fenced_);
  if (!exported_) return absl::UnavailableError("export withdrawn by Unmount");
  if (volume_ready_) {
    if (auto status = volume_ready_(); !status.ok()) return status;
  }
  if (export_check_) return export_check_();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Share::Mount(uint64_t generation) {
  if (!fenced_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("export withdrawn for good: ", fenced_));
  }
  // A generation far ahead of the handled one is no remount request a controller
  // makes (it asks for one more than it saw acknowledged); taken, it would push
  // every later counter towards the wrap.
  if (generation > generation_ && generation - generation_ > kMaxGenerationStep) {
    return absl::InvalidArgumentError(
        absl::StrCat("remount generation ", generation, " is more than ", kMaxGenerationStep,
                     " ahead of the handled ", generation_, "; refused"));
  }
  if (generation != 0 && generation <= generation_ && exported_) {
    spdlog::info("Mount generation {} already handled (at {}); nothing to do", generation,
                 generation_);
    return generation_;
  }
  const bool was_exported = exported_;
  exported_ = true;
  if (auto status = WriteConfig(); !status.ok()) {
    exported_ = was_exported;
    return status;
  }
  generation_ = generation != 0 ? std::max(generation, generation_)
                                : std::max(generation_, generation_ + 1);  // saturates
  spdlog::info("export {} at {} (re)exported, remount generation {}", config_.input().export_dir,
               config_.pseudo_path(), generation_);
  reload_();
  return generation_;
}

absl::Status Share::Unmount() {
  if (!exported_) return absl::OkStatus();
  exported_ = false;
  if (auto status = WriteConfig(); !status.ok()) {
    exported_ = true;
    return status;
  }
  spdlog::info("export {} withdrawn; ganesha keeps running without it", config_.pseudo_path());
  reload_();
  return absl::OkStatus();
}

void Share::Fill(sharemanager::v1::ShareStatus& status) const {
  const auto& in = config_.input();
  status.set_volume(in.volume);
  status.set_export_path(in.export_dir);
  status.set_nfs_address(in.bind_address);
  status.set_nfs_port(static_cast<uint32_t>(in.nfs_port));
  status.set_pseudo_path(config_.pseudo_path());
  status.set_exported(exported_ && fenced_.empty());
  status.set_remount_generation(generation_);
  status.set_volume_repairs(repairs_);
}

}  // namespace sharemgr
