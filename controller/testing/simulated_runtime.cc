#include "controller/testing/simulated_runtime.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace controller {

absl::StatusOr<Pod> SimulatedCluster::Create(const sharemanager::controller::v1::ShareSpec& spec,
                                             uint64_t epoch) {
  Pod pod{.name = PodName(spec.volume(), epoch),
          .volume = spec.volume(),
          .epoch = epoch,
          .phase = PodPhase::kRunning,
          .endpoint = absl::StrCat("sim:", spec.volume(), "/", epoch)};
  {
    absl::MutexLock lock(&mu_);
    if (pods_.contains(pod.name)) return absl::AlreadyExistsError(pod.name + " exists");
    pods_[pod.name] = SimPod{.pod = pod, .template_version = template_version_};
    by_volume_[pod.volume].push_back(pod.name);
  }
  listeners_.Notify(pod.volume);
  return pod;
}

bool SimulatedCluster::TakeFailure(int& budget) {
  if (budget == 0) return false;
  if (budget > 0) --budget;
  return true;
}

void SimulatedCluster::ReapLocked() const {
  if (deleting_.empty()) return;
  const int64_t now = NowMs();
  for (auto name = deleting_.begin(); name != deleting_.end();) {
    auto it = pods_.find(*name);
    if (it != pods_.end() && *it->second.gone_at_ms > now) {
      ++name;
      continue;
    }
    if (it != pods_.end()) {
      auto& names = by_volume_[it->second.pod.volume];
      names.erase(std::remove(names.begin(), names.end(), *name), names.end());
      pods_.erase(it);
    }
    name = deleting_.erase(name);
  }
}

absl::Status SimulatedCluster::Delete(const std::string& name) {
  std::string volume;
  {
    absl::MutexLock lock(&mu_);
    ++delete_calls_;
    if (TakeFailure(delete_failures_))
      return absl::UnavailableError("delete " + name + ": refused");
    auto it = pods_.find(name);
    if (it == pods_.end()) return absl::OkStatus();
    volume = it->second.pod.volume;
    if (delete_lag_ms_ > 0) {
      // Still running (and serving) through its termination grace period.
      if (!it->second.gone_at_ms) {
        it->second.gone_at_ms = NowMs() + delete_lag_ms_;
        deleting_.insert(name);
      }
      return absl::OkStatus();
    }
    pods_.erase(it);
    auto& names = by_volume_[volume];
    names.erase(std::remove(names.begin(), names.end(), name), names.end());
  }
  listeners_.Notify(volume);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Pod>> SimulatedCluster::List(const std::string& volume) {
  absl::MutexLock lock(&mu_);
  ReapLocked();
  std::vector<Pod> out;
  if (auto it = by_volume_.find(volume); it != by_volume_.end()) {
    for (const auto& name : it->second) {
      const SimPod& sim = pods_.at(name);
      out.push_back(sim.pod);
      out.back().outdated = sim.template_version != template_version_;
      out.back().terminating = sim.gone_at_ms.has_value();
    }
  }
  return out;
}

void SimulatedCluster::Watch(Listener listener) { listeners_.Add(std::move(listener)); }

ShareObservation SimulatedCluster::Observe(const Pod& pod) {
  const Fault fault = rpc_faults_.Next();
  absl::MutexLock lock(&mu_);
  ReapLocked();
  auto it = pods_.find(pod.name);
  if (it == pods_.end()) return {.error = "connection refused"};
  const SimPod& sim = it->second;
  if (fault != Fault::kNone || sim.frozen) return {.error = "deadline exceeded"};
  if (sim.pod.phase != PodPhase::kRunning) return {.error = "connection refused"};
  ShareObservation seen{.reachable = true,
                        .state = sim.serving && !sim.read_only ? sharemanager::v1::SERVING
                                                               : sharemanager::v1::DEGRADED,
                        .reason = sim.read_only ? "export filesystem is read-only" : "",
                        .read_only = sim.read_only,
                        .handled_generation = sim.handled_generation,
                        .epoch = sim.reported_epoch != 0 ? sim.reported_epoch : sim.pod.epoch,
                        .volume_state = sharemanager::v1::VOLUME_NONE};
  seen.volume = sim.reported_volume.empty() ? sim.pod.volume : sim.reported_volume;
  if (sim.repair) {
    seen.state = sim.startup_check ? sharemanager::v1::STARTING : sharemanager::v1::DEGRADED;
    seen.reason = "repairing: " + *sim.repair;
    seen.volume_state = sharemanager::v1::VOLUME_REPAIRING;
    seen.repair =
        RepairObservation{.what = *sim.repair, .elapsed_ms = NowMs() - sim.repair_started_ms};
  }
  return seen;
}

absl::StatusOr<uint64_t> SimulatedCluster::Mount(const Pod& pod, uint64_t epoch,
                                                 uint64_t generation) {
  const Fault fault = rpc_faults_.Next();
  absl::MutexLock lock(&mu_);
  ReapLocked();
  ++mount_calls_;
  if (TakeFailure(mount_failures_)) return absl::UnavailableError("Mount: refused");
  auto it = pods_.find(pod.name);
  if (it == pods_.end()) return absl::UnavailableError("connection refused");
  SimPod& sim = it->second;
  if (fault == Fault::kFail || fault == Fault::kTimeoutBefore || sim.frozen) {
    return absl::DeadlineExceededError("Mount: deadline exceeded");
  }
  if (epoch != 0 && epoch != sim.pod.epoch) {
    sim.stale_epoch_refusals++;
    return absl::FailedPreconditionError("stale epoch");
  }
  sim.mounts++;
  if (sim.repair) return absl::FailedPreconditionError("a repair is in progress");
  if (generation > sim.handled_generation) {
    sim.handled_generation = generation;
    sim.read_only = false;  // the remount repaired it
  }
  if (fault == Fault::kTimeoutAfter) return absl::DeadlineExceededError("Mount: deadline exceeded");
  return sim.handled_generation;
}

void SimulatedCluster::Kill(const std::string& name, int exit_code, const std::string& message) {
  std::string volume;
  {
    absl::MutexLock lock(&mu_);
    auto it = pods_.find(name);
    if (it == pods_.end()) return;
    it->second.pod.phase = exit_code == 0 ? PodPhase::kSucceeded : PodPhase::kFailed;
    it->second.pod.exit_code = exit_code;
    it->second.pod.termination_message = message;
    volume = it->second.pod.volume;
  }
  listeners_.Notify(volume);
}

void SimulatedCluster::Change(const std::string& name, const std::function<void(SimPod&)>& change) {
  absl::MutexLock lock(&mu_);
  if (auto it = pods_.find(name); it != pods_.end()) change(it->second);
}

void SimulatedCluster::Freeze(const std::string& name, bool frozen) {
  Change(name, [&](SimPod& sim) { sim.frozen = frozen; });
}

void SimulatedCluster::SetReadOnly(const std::string& name, bool read_only) {
  Change(name, [&](SimPod& sim) { sim.read_only = read_only; });
}

void SimulatedCluster::StartRepair(const std::string& name, const std::string& what,
                                   bool startup_check) {
  const int64_t now = NowMs();
  Change(name, [&](SimPod& sim) {
    sim.repair = what;
    sim.repair_started_ms = now;
    sim.startup_check = startup_check;
  });
}

void SimulatedCluster::EndRepair(const std::string& name, bool serving) {
  Change(name, [&](SimPod& sim) {
    sim.repair.reset();
    sim.serving = serving;
  });
}

void SimulatedCluster::SetReportedEpoch(const std::string& name, uint64_t epoch) {
  Change(name, [&](SimPod& sim) { sim.reported_epoch = epoch; });
}

void SimulatedCluster::SetReportedVolume(const std::string& name, const std::string& volume) {
  Change(name, [&](SimPod& sim) { sim.reported_volume = volume; });
}

void SimulatedCluster::SetHandledGeneration(const std::string& name, uint64_t generation) {
  Change(name, [&](SimPod& sim) { sim.handled_generation = generation; });
}

void SimulatedCluster::NewTemplate() {
  std::vector<std::string> volumes;
  {
    absl::MutexLock lock(&mu_);
    ++template_version_;
    for (const auto& [volume, names] : by_volume_) volumes.push_back(volume);
  }
  for (const auto& volume : volumes) listeners_.Notify(volume);
}

void SimulatedCluster::SetDeleteLag(int64_t ms) {
  absl::MutexLock lock(&mu_);
  delete_lag_ms_ = ms;
}

void SimulatedCluster::FailDeletes(int n) {
  absl::MutexLock lock(&mu_);
  delete_failures_ = n;
}

void SimulatedCluster::FailMounts(int n) {
  absl::MutexLock lock(&mu_);
  mount_failures_ = n;
}

uint64_t SimulatedCluster::delete_calls() const {
  absl::MutexLock lock(&mu_);
  return delete_calls_;
}

uint64_t SimulatedCluster::mount_calls() const {
  absl::MutexLock lock(&mu_);
  return mount_calls_;
}

std::vector<SimulatedCluster::SimPod> SimulatedCluster::Pods(const std::string& volume) const {
  absl::MutexLock lock(&mu_);
  ReapLocked();
  std::vector<SimPod> out;
  if (auto it = by_volume_.find(volume); it != by_volume_.end()) {
    for (const auto& name : it->second) out.push_back(pods_.at(name));
  }
  return out;
}

int SimulatedCluster::LivePods(const std::string& volume) const {
  int live = 0;
  for (const auto& p : Pods(volume)) {
    if (p.pod.phase == PodPhase::kRunning || p.pod.phase == PodPhase::kPending ||
        p.pod.phase == PodPhase::kUnknown) {
      ++live;
    }
  }
  return live;
}

}  // namespace controller
