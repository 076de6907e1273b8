#include "sharemgr/volume_owner.h"

#include <spdlog/spdlog.h>

#include <future>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/fmt_absl.h"

namespace sharemgr {
namespace {

using base::Clock;

base::TimePoint ToSteady(VolumeOwner::Deadline deadline) {
  const auto left = deadline - std::chrono::system_clock::now();
  // Infinite gRPC deadlines are far in the future; cap them so the sum cannot overflow.
  const auto capped = std::min<std::chrono::system_clock::duration>(left, std::chrono::hours(24));
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(capped);
}

std::string Seconds(base::TimePoint since) {
  return absl::StrCat(
      std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - since).count(), " s");
}

// Repairs run only on a mounted volume: one released, failed or stopping is not theirs.
std::function<absl::Status(VolumeState)> OnlyMounted(const char* refusal) {
  return [refusal](VolumeState state) {
    return state == VolumeState::kMounted
               ? absl::OkStatus()
               : absl::FailedPreconditionError(
                     absl::StrCat(refusal, ": the volume is ", VolumeStateName(state)));
  };
}

}  // namespace

const char* VolumeStateName(VolumeState state) {
  switch (state) {
    case VolumeState::kPreparing:
      return "preparing";
    case VolumeState::kMounted:
      return "mounted";
    case VolumeState::kReleased:
      return "released";
    case VolumeState::kRepairing:
      return "repairing";
    case VolumeState::kFailed:
      return "failed";
    case VolumeState::kStopping:
      return "stopping";
  }
  return "unknown";
}

VolumeOwner::VolumeOwner(Volume& volume, VolumeOwnerOptions options, OnChange on_change,
                         MayTouch may_touch)
    : volume_(volume),
      options_(std::move(options)),
      on_change_(std::move(on_change)),
      may_touch_(std::move(may_touch)),
      thread_([this] { ThreadMain(); }) {}

VolumeOwner::~VolumeOwner() {
  // The daemon calls Stop with its own budget first and does not destroy an
  // owner whose thread is stuck; this waits for a thread that will end.
  Stop(base::Duration::max());
  thread_.join();
}

absl::Status VolumeOwner::StoppedError(const std::string& what) const {
  if (!fenced_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(what, " refused: ", fenced_));
  }
  return absl::UnavailableError(absl::StrCat(what, " refused: share-manager is stopping"));
}

void VolumeOwner::Enqueue(Job job) {
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      refused = StoppedError(job.name);
    } else if (job.start_by && queued_for_callers_ >= kMaxQueuedForCallers) {
      refused = absl::ResourceExhaustedError(absl::StrCat(
          kMaxQueuedForCallers, " volume operations are already waiting; ", job.name, " refused"));
    } else {
      if (job.start_by) ++queued_for_callers_;
      if (job.repair) {
        ++queued_repairs_;
        // Behind other repairs, before callers' jobs.
        auto first_caller =
            std::find_if(queue_.begin(), queue_.end(), [](const Job& j) { return !j.repair; });
        queue_.insert(first_caller, std::move(job));
      } else {
        queue_.push_back(std::move(job));
      }
      return;
    }
  }
  if (job.done) job.done(refused);
}

void VolumeOwner::EnqueueRepair(Job job, const std::string& why) {
  job.repair = true;
  {
    absl::MutexLock lock(&mu_);
    if (!repair_ && !stopping_) {
      repair_ = RepairInfo{.what = absl::StrCat("queued: ", why),
                           .started = Clock::now(),
                           .started_wall = std::chrono::system_clock::now()};
    }
  }
  if (on_change_) on_change_();
  Enqueue(std::move(job));
}

void VolumeOwner::ThreadMain() {
  for (;;) {
    Job job;
    VolumeState state;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](VolumeOwner* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->quit_ || !self->queue_.empty();
          },
          this));
      if (queue_.empty()) break;  // quit_ with nothing left (Stop drops queued jobs)
      job = std::move(queue_.front());
      queue_.pop_front();
      if (job.start_by) --queued_for_callers_;
      state = state_;
      running_ = true;
      running_never_abandon_ = job.never_abandon;
    }
    absl::Status result = MayStart(job, state);
    if (result.ok()) {
      spdlog::debug("volume: {} starts", job.name);
      result = job.run();
    }
    bool repairs_left = false;
    if (job.repair) {
      absl::MutexLock lock(&mu_);
      repairs_left = --queued_repairs_ > 0;
    }
    // A repair that was refused (the volume released meanwhile) leaves no "queued".
    if (job.repair && !repairs_left) SetRepair(std::nullopt);
    // The outcome first, then the wake-up: a waiting caller that wakes finds it.
    if (job.done) job.done(result);
    {
      absl::MutexLock lock(&mu_);
      running_ = false;
      running_never_abandon_ = false;
      ++finished_jobs_;
    }
  }
  // Last, with ganesha gone: nothing may hold the device after the share-manager.
  if (volume_.ReadMountState().mounted) {
    if (auto s = volume_.Unmount(options_.unmount_budget); !s.ok()) {
      spdlog::error("volume: {}", s.message());
    }
  }
  absl::MutexLock lock(&mu_);
  finished_ = true;
}

void VolumeOwner::SetState(VolumeState state, std::string detail) {
  {
    absl::MutexLock lock(&mu_);
    // Stopping is final: an operation that ends during the stop does not undo it.
    if (state_ == VolumeState::kStopping ||
        (state_ == VolumeState::kFailed && state != VolumeState::kStopping)) {
      return;
    }
    if (state_ == state && detail_ == detail) return;
    if (state_ != state) {
      spdlog::info("volume {}: {} -> {}{}{}", volume_.config().device, VolumeStateName(state_),
                   VolumeStateName(state), detail.empty() ? "" : ": ", detail);
    }
    state_ = state;
    detail_ = std::move(detail);
  }
  if (on_change_) on_change_();
}

void VolumeOwner::SetRepair(std::optional<RepairInfo> repair) {
  {
    absl::MutexLock lock(&mu_);
    repair_ = std::move(repair);
  }
  if (on_change_) on_change_();
}

VolumeSnapshot VolumeOwner::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return VolumeSnapshot{.state = state_, .detail = detail_, .repair = repair_};
}

absl::Status VolumeOwner::CanRelease() const {
  return AdmitRpc(Snapshot().state, {VolumeState::kMounted, VolumeState::kReleased}, "Unmount");
}

absl::Status VolumeOwner::AdmitRpc(VolumeState state, std::initializer_list<VolumeState> allowed,
                                   const char* what) const {
  const VolumeSnapshot now = Snapshot();
  bool repair_queued = false;
  {
    absl::MutexLock lock(&mu_);
    repair_queued = queued_repairs_ > 0;
  }
  if (repair_queued && state == VolumeState::kMounted) {
    return absl::UnavailableError(
        absl::StrCat(what, " refused: a repair of the filesystem is queued",
                     now.repair ? absl::StrCat(" (", now.repair->what, ")") : ""));
  }
  for (VolumeState ok : allowed) {
    if (state == ok) return absl::OkStatus();
  }
  switch (state) {
    case VolumeState::kPreparing:
      return absl::UnavailableError(absl::StrCat(
          what, " refused: the volume is still being prepared (device, check, mount)",
          now.repair ? absl::StrCat(", ", Seconds(now.repair->started), " so far") : ""));
    case VolumeState::kRepairing:
      return absl::UnavailableError(
          absl::StrCat(what, " refused: repairing the filesystem",
                       now.repair ? absl::StrCat(" (", now.repair->what, "), ~",
                                                 Seconds(now.repair->started), " so far")
                                  : ""));
    case VolumeState::kFailed:
      return absl::FailedPreconditionError(
          absl::StrCat(what, " refused: the volume failed: ", now.detail));
    case VolumeState::kStopping: {
      absl::MutexLock lock(&mu_);
      return StoppedError(what);
    }
    case VolumeState::kReleased:
      return absl::FailedPreconditionError(
          absl::StrCat(what, " refused: the volume was unmounted by Unmount; Mount it first"));
    case VolumeState::kMounted:
      break;
  }
  return absl::FailedPreconditionError(absl::StrCat(what, " refused: the volume is mounted"));
}

absl::Status VolumeOwner::MayStart(const Job& job, VolumeState state) const {
  if (job.start_by && Clock::now() > *job.start_by) {
    return absl::DeadlineExceededError(
        absl::StrCat(job.name, " waited for its turn past the caller's deadline"));
  }
  if (job.touches_device && may_touch_) {
    if (auto may = may_touch_(); !may.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(job.name, " not started: ", may.message()));
    }
  }
  return job.admit(state);
}

absl::Status VolumeOwner::RunForCaller(std::string name,
                                       std::function<absl::Status(VolumeState)> admit,
                                       std::function<absl::Status()> run, Deadline deadline,
                                       bool touches_device) {
  // Refuse at once what cannot run now; what can waits for its turn.
  if (auto now = admit(Snapshot().state); !now.ok()) return now;
  const std::string name_for_refusal = name;
  // Shared with the job, which may finish after the caller gave up.
  auto outcome = std::make_shared<std::promise<absl::Status>>();
  auto result = outcome->get_future();
  const base::TimePoint start_by = ToSteady(deadline);
  Enqueue(Job{.name = std::move(name),
              .admit = std::move(admit),
              .run = std::move(run),
              .done = [outcome](absl::Status s) { outcome->set_value(std::move(s)); },
              .start_by = start_by,
              .touches_device = touches_device});
  // Wake at the deadline, when a job ends (ours may be done) or when stopping
  // starts. `seen` is read before the outcome is looked at: a job's outcome is
  // set before the count moves, so an outcome missed here moves the count later.
  for (;;) {
    uint64_t seen = 0;
    bool stopping = false;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
      seen = finished_jobs_;
    }
    if (result.wait_for(std::chrono::seconds(0)) == std::future_status::ready) return result.get();
    if (stopping) {
      absl::MutexLock lock(&mu_);
      return StoppedError(name_for_refusal);
    }
    absl::MutexLock lock(&mu_);
    auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || finished_jobs_ != seen;
    };
    if (!mu_.AwaitWithDeadline(
            absl::Condition(&changed),
            absl::FromChrono(
                std::min(deadline, std::chrono::system_clock::now() + std::chrono::hours(24))))) {
      return absl::DeadlineExceededError(
          "the volume operation did not complete before the caller's deadline; if it started, it "
          "goes on until it ends (a trim: to the end of the range it is trimming, then it stops "
          "and logs how far it got)");
    }
  }
}

void VolumeOwner::Prepare(Done done) {
  Enqueue(Job{.name = "prepare",
              .admit = [](VolumeState) { return absl::OkStatus(); },
              .run =
                  [this] {
                    SetRepair(RepairInfo{.what = "preparing the volume: device, check, mount",
                                         .started = Clock::now(),
                                         .started_wall = std::chrono::system_clock::now()});
                    absl::Status status = volume_.Prepare();
                    SetRepair(std::nullopt);
                    if (status.ok()) {
                      SetState(VolumeState::kMounted, "");
                    } else {
                      SetState(VolumeState::kFailed, std::string(status.message()));
                    }
                    return status;
                  },
              .done = std::move(done),
              .never_abandon = true});
}

void VolumeOwner::RepairInPlace(std::string why, Done done) {
  const std::string queued = why;
  EnqueueRepair(
      Job{.name = "remount read-write",
          .admit = OnlyMounted("no in-place repair"),
          .run =
              [this, why = std::move(why)] {
                SetState(VolumeState::kRepairing, why);
                SetRepair(RepairInfo{.what = absl::StrCat("remount read-write (", why, ")"),
                                     .started = Clock::now(),
                                     .started_wall = std::chrono::system_clock::now()});
                absl::Status status = volume_.RemountReadWrite();
                SetRepair(std::nullopt);
                SetState(VolumeState::kMounted, status.ok() ? "" : std::string(status.message()));
                return status;
              },
          .done = std::move(done)},
      queued);
}

void VolumeOwner::RepairFull(std::string why, Done done) {
  const std::string queued = why;
  EnqueueRepair(Job{.name = "full repair",
                    .admit = OnlyMounted("no repair"),
                    .run = [this, why = std::move(why)] { return DoRepairFull(why); },
                    .done = std::move(done),
                    .never_abandon = true},
                queued);
}

bool VolumeOwner::PauseUnlessStopping(base::Duration pause) {
  absl::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  return !mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::FromChrono(pause));
}

absl::Status VolumeOwner::DoRepairFull(const std::string& why) {
  const base::TimePoint now = Clock::now();
  int in_window = 0;
  {
    absl::MutexLock lock(&mu_);
    std::erase_if(full_repairs_,
                  [&](base::TimePoint t) { return now - t > options_.repair_window; });
    in_window = static_cast<int>(full_repairs_.size());
    if (in_window < options_.max_full_repairs) full_repairs_.push_back(now);
  }
  if (in_window >= options_.max_full_repairs) {
    const std::string reason = absl::StrCat(
        "the volume needed ", in_window, " full repairs within ",
        base::FormatDuration(options_.repair_window), " (--max-repairs ", options_.max_full_repairs,
        "); it keeps failing, so it is not checked again: ", why);
    SetState(VolumeState::kFailed, reason);
    return absl::DataLossError(reason);
  }
  SetState(VolumeState::kRepairing, why);
  RepairInfo info{.started = now,
                  .started_wall = std::chrono::system_clock::now(),
                  .full_repairs_in_window = in_window + 1,
                  .max_full_repairs = options_.max_full_repairs};
  absl::Status status;
  for (int attempt = 1; attempt <= options_.attempts_per_repair; ++attempt) {
    auto step = [&](const std::string& what) {
      info.what = absl::StrCat(what, " (full repair after ", why, ", attempt ", attempt, "/",
                               options_.attempts_per_repair, ")");
      SetRepair(info);
    };
    // A device that is gone or returns I/O errors is no filesystem to fsck.
    step("checking the device");
    if (auto device = volume_.CheckDevice(); !device.ok()) {
      const std::string reason = absl::StrCat("not repairing the filesystem: ", device.message());
      SetRepair(std::nullopt);
      SetState(VolumeState::kFailed, reason);
      return absl::UnavailableError(reason);
    }
    step("unmounting");
    if (!PauseUnlessStopping(options_.export_drain)) break;
    status = volume_.Unmount(options_.unmount_budget);
    if (status.ok()) {
      step("checking the filesystem");
      status = volume_.Check(CheckMode::kRepair);
    }
    if (status.ok()) {
      step("mounting");
      status = volume_.Mount();
    }
    if (status.ok()) break;
    spdlog::error("repair of {} failed (attempt {}/{}): {}", volume_.config().device, attempt,
                  options_.attempts_per_repair, status.message());
    if (attempt < options_.attempts_per_repair &&
        !PauseUnlessStopping(options_.attempt_backoff * (1 << (attempt - 1)))) {
      break;
    }
  }
  SetRepair(std::nullopt);
  if (Snapshot().state == VolumeState::kStopping) {
    return absl::UnavailableError("repair interrupted: share-manager is stopping");
  }
  if (!status.ok()) {
    const std::string reason =
        absl::StrCat("volume ", volume_.config().device, " could not be repaired after ",
                     options_.attempts_per_repair, " attempts: ", status.message());
    SetState(VolumeState::kFailed, reason);
    return absl::DataLossError(reason);
  }
  SetState(VolumeState::kMounted, "");
  return absl::OkStatus();
}

absl::Status VolumeOwner::Attach(Deadline deadline) {
  return RunForCaller(
      "mount (Mount)",
      [this](VolumeState s) {
        return AdmitRpc(s, {VolumeState::kMounted, VolumeState::kReleased}, "Mount");
      },
      [this] {
        if (!volume_.ReadMountState().mounted) {
          if (auto status = volume_.Mount(); !status.ok()) return status;
        }
        SetState(VolumeState::kMounted, "");
        return absl::OkStatus();
      },
      deadline);
}

absl::Status VolumeOwner::Release(Deadline deadline) {
  return RunForCaller(
      "unmount (Unmount)", [this](VolumeState) { return CanRelease(); },
      [this] {
        // Released first: the monitor must not take the unmount for a failure.
        SetState(VolumeState::kReleased, "unmounted by Unmount");
        auto status = volume_.Unmount(options_.unmount_budget);
        if (!status.ok()) SetState(VolumeState::kMounted, "");
        return status;
      },
      // Allowed after the lease ended: unmounting only shrinks what this
      // share-manager holds (the fence unmounts too).
      deadline, /*touches_device=*/false);
}

template <typename T>
absl::StatusOr<T> VolumeOwner::RunMountedOp(const char* what, std::function<absl::StatusOr<T>()> op,
                                            Deadline deadline) {
  // Shared with the job, which may finish after the caller gave up waiting.
  auto result = std::make_shared<T>();
  auto status = RunForCaller(
      what, [this, what](VolumeState s) { return AdmitRpc(s, {VolumeState::kMounted}, what); },
      [op = std::move(op), result]() -> absl::Status {
        auto value = op();
        if (!value.ok()) return value.status();
        *result = *std::move(value);
        return absl::OkStatus();
      },
      deadline);
  if (!status.ok()) return status;
  return *result;
}

absl::StatusOr<uint64_t> VolumeOwner::Trim(Deadline deadline) {
  const base::TimePoint caller_gives_up = ToSteady(deadline);
  return RunMountedOp<uint64_t>(
      "trim",
      [this, caller_gives_up] {
        return volume_.Trim(TrimWorkDeadline(Clock::now(), options_.max_op_time, caller_gives_up),
                            [this] { return TrimMayGoOn(); });
      },
      deadline);
}

absl::Status VolumeOwner::TrimMayGoOn() const {
  // The lease first: the loop that would fence may be stalled.
  if (may_touch_) {
    if (auto may = may_touch_(); !may.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("trim stopped: ", may.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  if (!fenced_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("trim stopped: the volume is fenced (", fenced_, ")"));
  }
  // UNAVAILABLE, as an operation refused for these reasons before it starts:
  // the caller may retry (CANCELLED would say it cancelled).
  if (stopping_) return absl::UnavailableError("trim stopped: share-manager is stopping");
  if (queued_repairs_ > 0) {
    return absl::UnavailableError("trim stopped: a repair of the filesystem is waiting");
  }
  return absl::OkStatus();
}

absl::StatusOr<ResizeResult> VolumeOwner::Resize(Deadline deadline) {
  return RunMountedOp<ResizeResult>(
      "resize", [this] { return volume_.Resize(); }, deadline);
}

void VolumeOwner::BeginStop() {
  std::deque<Job> dropped;
  absl::Status refused;
  std::string detail;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    dropped.swap(queue_);
    refused = StoppedError("queued volume operation");
    detail = fenced_.empty() ? "share-manager is stopping" : fenced_;
  }
  SetState(VolumeState::kStopping, std::move(detail));
  // A running check or mkfs gets SIGTERM (it stops at a safe point); a device
  // wait ends. Nothing is SIGKILLed.
  volume_.RequestStop();
  for (Job& job : dropped) {
    if (job.done) job.done(refused);
  }
}

void VolumeOwner::Fence(std::string why) {
  {
    absl::MutexLock lock(&mu_);
    if (fenced_.empty()) fenced_ = why;
  }
  BeginStop();
  spdlog::error("volume {}: no more operations ({}); unmounting it once the running one ends",
                volume_.config().device, why);
  // The device thread ends after the running operation, then unmounts.
  absl::MutexLock lock(&mu_);
  quit_ = true;
}

bool VolumeOwner::Stop(base::Duration budget) {
  BeginStop();
  absl::MutexLock lock(&mu_);
  quit_ = true;
  auto done_or_checking = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return finished_ || (running_ && running_never_abandon_);
  };
  auto done_or_check_ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return finished_ || !(running_ && running_never_abandon_);
  };
  for (;;) {
    if (finished_) return true;
    if (running_ && running_never_abandon_) {
      // A filesystem check or mkfs asked to stop: abandoning it would let the
      // process exit SIGKILL it mid-write. Only the kubelet's own SIGKILL may.
      spdlog::info("volume: waiting for the running filesystem check to stop");
      mu_.Await(absl::Condition(&done_or_check_ended));
      continue;
    }
    if (budget == base::Duration::max()) {
      mu_.Await(absl::Condition(&done_or_checking));
      continue;
    }
    if (!mu_.AwaitWithTimeout(absl::Condition(&done_or_checking), absl::FromChrono(budget))) {
      spdlog::error("volume: an operation on {} is still running after {}; not waiting longer",
                    volume_.config().device, base::FormatDuration(budget));
      return false;
    }
  }
}

}  // namespace sharemgr
