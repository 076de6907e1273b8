// Watches a mounted volume and repairs it, on the supervisor loop. Checked two
// ways, because the kernel does not announce every failure: mountinfo change
// events (POLLPRI: someone remounted or unmounted the export) and an active
// probe every interval (superblock options from mountinfo, then a stat and a
// directory read of the export root on a worker thread, so an I/O stuck in
// the kernel counts as a failure and blocks nothing else).
//
// Repairs, once per event: a plain read-only remount -> remount read-write;
// a filesystem error (ext4 emergency_ro, EIO), or the export unmounted ->
// unexport, unmount, check, mount, re-export. Bounded attempts with backoff;
// then give up (FAILED).
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "sharemanager/v1/sharemanager.pb.h"
#include "sharemgr/volume.h"
#include "supervisor/event_loop.h"
#include "supervisor/worker.h"

namespace sharemgr {

enum class VolumeCondition { kHealthy, kReadOnly, kFsError, kUnmounted, kStuck, kReleased };

struct VolumeHooks {
  // Readiness inputs changed (re-evaluate and publish).
  std::function<void()> changed;
  // Take the export away from ganesha / give it back (the latter also counts
  // one remount generation). `changed` follows either repair hook.
  std::function<void()> withdraw_export;
  std::function<void()> restore_export;
  // A repair that kept the export (remount read-write) counts one generation.
  std::function<void()> repaired_in_place;
  // Repair is impossible: the daemon fails.
  std::function<void(const std::string& reason)> give_up;
};

class VolumeMonitor {
 public:
  static constexpr int kMaxRepairAttempts = 3;

  VolumeMonitor(supervisor::EventLoop& loop, Volume& volume, base::Duration probe_interval,
                VolumeHooks hooks);
  ~VolumeMonitor();
  VolumeMonitor(const VolumeMonitor&) = delete;
  VolumeMonitor& operator=(const VolumeMonitor&) = delete;

  void Start();
  // Ok while the volume is healthy and not under repair.
  absl::Status Ready() const;
  // Fields that change with every write (size and free bytes) are not part of
  // the published status (they would make every probe a "change"); they are
  // filled in when a status is sent. Any thread.
  void FillUsage(sharemanager::v1::ShareStatus& status) const;
  void Fill(sharemanager::v1::ShareStatus& status) const;
  // Checks now (e.g. after a Mount request).
  void CheckNow() { Check(); }
  // Unmount asked for the volume to be unmounted: its absence is then no
  // failure to repair. Any thread.
  void SetReleased(bool released) { released_ = released; }

 private:
  struct Health {
    VolumeCondition condition = VolumeCondition::kHealthy;
    std::string detail;
    MountState mount;
    uint64_t size_bytes = 0;
    uint64_t free_bytes = 0;
  };
  void Check();
  void OnHealth(Health health);
  void Repair();
  void RepairFailed(const std::string& error);
  void FinishRepair(const std::function<void()>& hook);

  supervisor::EventLoop& loop_;
  Volume& volume_;
  base::Duration probe_interval_;
  VolumeHooks hooks_;
  Health health_;
  bool repairing_ = false;
  std::atomic<bool> released_{false};
  // A check was asked for while a probe ran: probe again when it returns, so
  // the newest state (e.g. right after a repair) is seen at once.
  bool recheck_ = false;
  std::atomic<uint64_t> size_bytes_{0};
  std::atomic<uint64_t> free_bytes_{0};
  int attempts_ = 0;
  base::UniqueFd mountinfo_;
  uint64_t mountinfo_token_ = 0;
  supervisor::Timer probe_timer_;
  supervisor::Timer retry_timer_;
  supervisor::Worker probe_worker_;
  supervisor::Worker repair_worker_;
};

}  // namespace sharemgr
