// Watches a mounted volume and asks its owner to repair it, on the supervisor
// loop. Checked two ways, because the kernel does not announce every failure:
// mountinfo change events (POLLPRI: someone remounted or unmounted the export)
// and an active probe every interval (superblock options from mountinfo, then
// a stat and a directory read of the export root on a worker thread, so an
// I/O stuck in the kernel counts as a failure and blocks nothing else).
//
// Repairs, once per event, run by the VolumeOwner on its device thread: a
// plain read-only remount -> remount read-write; a filesystem error (ext4
// emergency_ro, EIO), or the export unmounted -> unexport, then the owner's
// full repair (device check, unmount, fsck, mount), then re-export. The owner
// bounds attempts and repairs per window; beyond them the share fails.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "sharemanager/v1/sharemanager.pb.h"
#include "sharemgr/volume.h"
#include "sharemgr/volume_owner.h"
#include "supervisor/event_loop.h"
#include "supervisor/worker.h"

namespace sharemgr {

enum class VolumeCondition { kHealthy, kReadOnly, kFsError, kUnmounted, kStuck, kReleased };

// The two repairs: remount read-write in place, or the full cycle (unexport,
// device check, unmount, fsck, mount, re-export).
enum class RepairKind { kRemount, kFull };
enum class RepairOutcome {
  kOk,
  kFailed,  // an in-place remount that escalates to the full cycle, or a full one that fails the
            // share
  kNotRun,  // the volume was released (Unmount) before it could run
};

struct VolumeHooks {
  // Readiness inputs changed (re-evaluate and publish).
  std::function<void()> changed;
  // Take the export away from ganesha / give it back (the latter also counts
  // one remount generation). `changed` follows either repair hook.
  std::function<void()> withdraw_export;
  // `repaired`: false when the repair did not run (the volume was released
  // meanwhile); the export comes back without counting a generation.
  std::function<void(bool repaired)> restore_export;
  // A repair that kept the export (remount read-write) counts one generation.
  std::function<void()> repaired_in_place;
  // Repair is impossible (or the repair budget is spent): the daemon fails.
  std::function<void(const std::string& reason)> give_up;
  // For metrics; each optional. The volume turned read-only (remounted so by
  // someone, or a filesystem error): once per event.
  std::function<void()> turned_read_only;
  // A repair ended: which, how, and how long since it was asked for.
  std::function<void(RepairKind kind, RepairOutcome outcome, base::Clock::duration took)> repaired;
  // What each probe of the mounted volume found (statvfs).
  std::function<void(const FsUsage& usage)> usage;
};

class VolumeMonitor {
 public:
  VolumeMonitor(supervisor::EventLoop& loop, VolumeOwner& owner, VolumeConfig volume,
                base::Duration probe_interval, VolumeHooks hooks);
  ~VolumeMonitor();
  VolumeMonitor(const VolumeMonitor&) = delete;
  VolumeMonitor& operator=(const VolumeMonitor&) = delete;

  void Start();
  // Ok while the volume is healthy and not under repair. Loop thread.
  absl::Status Ready() const;
  // Fields that change with every write (size and free bytes) are not part of
  // the published status (they would make every probe a "change"); they are
  // filled in when a status is sent. Any thread.
  void FillUsage(sharemanager::v1::ShareStatus& status) const;
  void Fill(sharemanager::v1::ShareStatus& status) const;
  // Checks now (e.g. after a Mount request, or when the owner's state changed).
  void CheckNow() { Check(); }
  // Stops probing for good: no more checks, so no more repairs (the volume is
  // fenced). A probe in flight ends unheard. Loop thread.
  void Stop();
  // Waits up to `budget` for a probe in flight (before destruction); false
  // when it is stuck in the kernel.
  bool WaitIdle(base::Duration budget) { return probe_worker_.WaitIdle(budget); }

 private:
  struct Health {
    VolumeCondition condition = VolumeCondition::kHealthy;
    std::string detail;
    MountState mount;
    std::optional<FsUsage> usage;  // when mounted and statvfs answered
  };
  void Check();
  void OnHealth(Health health);
  void Repair();
  void RepairFull();
  void OnRepairDone(bool in_place, const absl::Status& result);
  void ReportRepair(bool in_place, RepairOutcome outcome) const;
  // Runs `done` on the loop thread, unless this monitor is gone by then.
  VolumeOwner::Done OnLoop(std::function<void(absl::Status)> done);

  supervisor::EventLoop& loop_;
  VolumeOwner& owner_;
  const VolumeConfig volume_;
  base::Duration probe_interval_;
  VolumeHooks hooks_;
  Health health_;
  // A repair was handed to the owner and has not reported back.
  bool repair_requested_ = false;
  // When the repair under way was asked for (metrics time it from there).
  base::TimePoint repair_started_{};
  // Counts repair requests and their ends: a probe result from before the
  // latest of them describes a volume that has changed since.
  uint64_t repairs_ = 0;
  // A check was asked for while a probe ran: probe again when it returns, so
  // the newest state (e.g. right after a repair) is seen at once.
  bool recheck_ = false;
  bool stopped_ = false;
  std::atomic<uint64_t> size_bytes_{0};
  std::atomic<uint64_t> free_bytes_{0};
  base::UniqueFd mountinfo_;
  uint64_t mountinfo_token_ = 0;
  supervisor::Timer probe_timer_;
  supervisor::Worker probe_worker_;
  // Results posted to the loop check this before touching the monitor.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace sharemgr
