// The one owner of a block-device volume. Every operation on the device
// (prepare at start, the Mount/Unmount RPCs, repairs, trim, resize, the final
// unmount at stop) runs on the owner's device thread, one at a time, in an
// explicit state. An operation that cannot run in the current state is
// refused at once with a clear status; one that can waits for its turn within
// its caller's deadline. Nothing else touches the device.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "sharemgr/volume.h"

namespace sharemgr {

enum class VolumeState { kPreparing, kMounted, kReleased, kRepairing, kFailed, kStopping };

const char* VolumeStateName(VolumeState state);

struct VolumeOwnerOptions {
  // Full repairs (unmount, check, mount) allowed within `repair_window`; the
  // next one fails the volume instead: a device that keeps failing is not
  // checked and remounted for ever.
  int max_full_repairs = 3;
  base::Duration repair_window{std::chrono::hours(1)};
  // Attempts within one full repair, with a growing pause between them.
  int attempts_per_repair = 3;
  base::Duration attempt_backoff{500};
  // Let ganesha drop the export (it rereads its config) before unmounting.
  base::Duration export_drain{200};
  base::Duration unmount_budget{10'000};
  // A trim's work stops by its start + this, or by its caller's deadline if
  // that comes first (a caller that gave up does not keep the device), between
  // two of its ranges (--max-volume-op-time).
  base::Duration max_op_time{std::chrono::minutes(10)};
};

// A repair (or the start-up check) in progress, as published in the status.
struct RepairInfo {
  std::string what;
  base::TimePoint started;
  std::chrono::system_clock::time_point started_wall;
  int full_repairs_in_window = 0;
  int max_full_repairs = 0;
};

struct VolumeSnapshot {
  VolumeState state = VolumeState::kPreparing;
  // Why it failed, or what was asked of it last.
  std::string detail;
  std::optional<RepairInfo> repair;
};

class VolumeOwner {
 public:
  // Outcome of an internal operation; runs on the device thread.
  using Done = std::function<void(absl::Status)>;
  // Every state or repair change; runs on the device thread.
  using OnChange = std::function<void()>;
  using Deadline = std::chrono::system_clock::time_point;
  // Callers' operations waiting at once; more are refused (RESOURCE_EXHAUSTED).
  static constexpr int kMaxQueuedForCallers = 8;

  // Whether this share-manager may still touch the device (its serving lease
  // valid): OK, or why not. Asked on the device thread right before every
  // job that writes the device starts (prepare, Mount, trim, resize,
  // repairs), so a job queued while the lease was valid does not start after
  // it ended (the loop that would fence may be stalled). Any thread may call
  // it; null: always.
  using MayTouch = std::function<absl::Status()>;

  VolumeOwner(Volume& volume, VolumeOwnerOptions options, OnChange on_change,
              MayTouch may_touch = nullptr);
  // Stops (see Stop) and joins the device thread.
  ~VolumeOwner();
  VolumeOwner(const VolumeOwner&) = delete;
  VolumeOwner& operator=(const VolumeOwner&) = delete;

  // Internal operations, queued behind whatever runs; any thread.
  // Wait for the device, detect, (format), check, mount: kPreparing -> kMounted or kFailed.
  // MayTouch can still call it off (its error is the outcome; the volume
  // stays untouched).
  void Prepare(Done done);
  // A read-only remount: remount read-write in place (kRepairing while it runs).
  void RepairInPlace(std::string why, Done done);
  // A filesystem error or a lost mount, once the export is withdrawn: check
  // the device, then unmount, check, mount (a few attempts). Counts against
  // the repair budget; spent, or the device failing: kFailed.
  void RepairFull(std::string why, Done done);

  // RPC operations; any thread. They wait for their turn until `deadline`,
  // and are refused at once while the volume is preparing, repairing, failed
  // or stopping.
  absl::Status Attach(Deadline deadline);   // Mount: a released volume is mounted again
  absl::Status Release(Deadline deadline);  // Unmount: kMounted -> kReleased
  // What Release would answer at once in the current state (OK if it may run).
  absl::Status CanRelease() const;
  // The trim stops between two ranges at the caller's deadline or after
  // max_op_time of work (DEADLINE_EXCEEDED, what it trimmed); see Volume::Trim.
  // It stops there too once MayTouch refuses, the owner is fenced or stopping,
  // or a repair is queued: no FITRIM after the lease or into a repair's way.
  absl::StatusOr<uint64_t> Trim(Deadline deadline);
  // The grow runs as one helper (resize2fs, xfs_growfs) bounded by the
  // volume's helper_timeout; it is not stopped at the caller's deadline.
  absl::StatusOr<ResizeResult> Resize(Deadline deadline);

  // Stopping starts: new work is refused, queued work is dropped, waiting
  // callers are answered, the running operation is asked to stop (a filesystem
  // check gets SIGTERM and stops at a safe point; nothing is SIGKILLed). Any thread.
  void BeginStop();
  // Stops for good at once because this share-manager may no longer touch
  // the volume (its serving lease is lost): BeginStop, except that every
  // operation is refused FAILED_PRECONDITION with `why`, and the volume is
  // unmounted as soon as the running operation ends, without waiting for
  // Stop. Call once ganesha has been killed (the unmount waits out a busy
  // target while it goes). Any thread.
  void Fence(std::string why);
  // BeginStop, then waits for the device thread to finish: the running
  // operation (a filesystem check however long it takes to stop; anything
  // else up to `budget`), then the final unmount (up to `budget`). False when
  // something was still running at the budget (stuck in the kernel): the
  // device thread cannot be joined then.
  bool Stop(base::Duration budget);

  VolumeSnapshot Snapshot() const;

 private:
  struct Job {
    std::string name;
    // Admission, checked when the job is about to run (the state may have
    // moved since it was queued).
    std::function<absl::Status(VolumeState)> admit;
    std::function<absl::Status()> run;
    Done done;
    std::optional<base::TimePoint> start_by;  // a caller's deadline; unset for internal jobs
    // A repair goes before callers' jobs, and callers' jobs that touch the
    // device are refused while one is queued.
    bool repair = false;
    // Runs a filesystem check or mkfs (prepare, full repair): once asked to
    // stop it is waited for however long it takes, never abandoned to a
    // process exit that would SIGKILL it.
    bool never_abandon = false;
    // Asks MayTouch before it starts. Only an unmount does not: it shrinks
    // what this share-manager holds, which is what a lease's end asks for.
    bool touches_device = true;
  };

  void Enqueue(Job job);
  // Publishes a repair as queued, so the controller sees it before it starts.
  void EnqueueRepair(Job job, const std::string& why);
  // Queues a job for an RPC and waits for its outcome until `deadline`.
  absl::Status RunForCaller(std::string name, std::function<absl::Status(VolumeState)> admit,
                            std::function<absl::Status()> run, Deadline deadline,
                            bool touches_device = true);
  // RunForCaller for a volume operation that needs the volume mounted.
  template <typename T>
  absl::StatusOr<T> RunMountedOp(const char* what, std::function<absl::StatusOr<T>()> op,
                                 Deadline deadline);
  void ThreadMain();
  // Whether `job` may start now, in `state` (device thread).
  absl::Status MayStart(const Job& job, VolumeState state) const;
  void SetState(VolumeState state, std::string detail);
  void SetRepair(std::optional<RepairInfo> repair);
  // Refusal for a state in which an RPC cannot run; OK in `allowed` states.
  absl::Status AdmitRpc(VolumeState state, std::initializer_list<VolumeState> allowed,
                        const char* what) const;
  absl::Status DoRepairFull(const std::string& why);
  // Whether a running trim may start its next range (device thread): OK, or
  // why not (see Trim).
  absl::Status TrimMayGoOn() const;
  // Sleeps unless stopping; false when stopping.
  bool PauseUnlessStopping(base::Duration pause);
  // What an operation is refused with once stopping.
  absl::Status StoppedError(const std::string& what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Volume& volume_;
  const VolumeOwnerOptions options_;
  const OnChange on_change_;
  const MayTouch may_touch_;

  mutable absl::Mutex mu_;
  VolumeState state_ ABSL_GUARDED_BY(mu_) = VolumeState::kPreparing;
  std::string detail_ ABSL_GUARDED_BY(mu_);
  std::optional<RepairInfo> repair_ ABSL_GUARDED_BY(mu_);
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool running_never_abandon_ ABSL_GUARDED_BY(mu_) = false;
  int queued_repairs_ ABSL_GUARDED_BY(mu_) = 0;
  int queued_for_callers_ ABSL_GUARDED_BY(mu_) = 0;
  // The device thread has ended (after the final unmount).
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Why, once fenced (see Fence).
  std::string fenced_ ABSL_GUARDED_BY(mu_);
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  // Wakes RPC callers that wait for a job (every job end, and at stop).
  uint64_t finished_jobs_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<base::TimePoint> full_repairs_ ABSL_GUARDED_BY(mu_);  // device thread writes

  std::thread thread_;  // last: starts once everything above is initialized
};

}  // namespace sharemgr
