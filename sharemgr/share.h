// The exported share: owns ganesha.conf and the export's lifecycle (Mount,
// Unmount, remount generation). Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "sharemanager/v1/sharemanager.pb.h"
#include "sharemgr/ganesha_config.h"

namespace sharemgr {

class Share {
 public:
  // `reload` makes ganesha reread its exports (SIGHUP) and re-checks readiness.
  Share(GaneshaConfig config, std::string config_path, std::function<void()> reload);

  // Writes ganesha.conf for the current export state, atomically.
  absl::Status WriteConfig() const;

  // What besides a NULL answer makes the share ready: exported, the volume
  // ready, and ganesha serving the export.
  absl::Status CheckReady();

  // The volume's readiness, judged off the loop thread (the VolumeMonitor for
  // a block device, the probe's directory check for a directory share).
  void SetVolumeReady(std::function<absl::Status()> volume_ready) {
    volume_ready_ = std::move(volume_ready);
  }
  // What ganesha itself says of the export (the last NFS LOOKUP of the pseudo
  // path): NULL answers even when an export failed to load.
  void SetExportCheck(std::function<absl::Status()> export_check) {
    export_check_ = std::move(export_check);
  }
  // The volume is taken away from ganesha during a repair, and given back.
  void SetVolumeAvailable(bool available);
  // The serving lease is lost: the export is withdrawn for good (Mount is
  // refused from now on), so no ganesha of this process serves it again.
  void Fence(const std::string& why);
  // A repair of the volume counts as one remount generation (and one repair).
  void CountRemount();

  // How far ahead of the handled generation a Mount may ask (a replacement
  // share-manager starts at 0 while its controller may be at a few hundred).
  static constexpr uint64_t kMaxGenerationStep = uint64_t{1} << 32;
  // (Re)exports. A generation at or below the handled one is a no-op; 0 asks
  // for one more; one more than kMaxGenerationStep ahead is refused
  // (INVALID_ARGUMENT). Returns the handled generation.
  absl::StatusOr<uint64_t> Mount(uint64_t generation);
  // Withdraws the export; ganesha keeps running. Idempotent.
  absl::Status Unmount();

  void Fill(sharemanager::v1::ShareStatus& status) const;

 private:
  GaneshaConfig config_;
  std::string config_path_;
  std::function<void()> reload_;
  std::function<absl::Status()> volume_ready_;
  std::function<absl::Status()> export_check_;
  bool exported_ = true;
  bool volume_available_ = true;
  std::string fenced_;  // why, once fenced
  uint64_t generation_ = 0;
  uint32_t repairs_ = 0;
};

}  // namespace sharemgr
