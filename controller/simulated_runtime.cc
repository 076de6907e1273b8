#include "controller/simulated_runtime.h"

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
    std::lock_guard lock(mu_);
    if (pods_.contains(pod.name)) return absl::AlreadyExistsError(pod.name + " exists");
    pods_[pod.name] = SimPod{.pod = pod};
    by_volume_[pod.volume].push_back(pod.name);
  }
  listeners_.Notify(pod.volume);
  return pod;
}

absl::Status SimulatedCluster::Delete(const std::string& name) {
  std::string volume;
  {
    std::lock_guard lock(mu_);
    auto it = pods_.find(name);
    if (it == pods_.end()) return absl::OkStatus();
    volume = it->second.pod.volume;
    pods_.erase(it);
    auto& names = by_volume_[volume];
    names.erase(std::remove(names.begin(), names.end(), name), names.end());
  }
  listeners_.Notify(volume);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Pod>> SimulatedCluster::List(const std::string& volume) {
  std::lock_guard lock(mu_);
  std::vector<Pod> out;
  if (auto it = by_volume_.find(volume); it != by_volume_.end()) {
    for (const auto& name : it->second) out.push_back(pods_.at(name).pod);
  }
  return out;
}

void SimulatedCluster::Watch(Listener listener) { listeners_.Add(std::move(listener)); }

ShareObservation SimulatedCluster::Observe(const Pod& pod) {
  const Fault fault = rpc_faults_.Next();
  std::lock_guard lock(mu_);
  auto it = pods_.find(pod.name);
  if (it == pods_.end()) return {.error = "connection refused"};
  const SimPod& sim = it->second;
  if (fault != Fault::kNone || sim.frozen) return {.error = "deadline exceeded"};
  if (sim.pod.phase != PodPhase::kRunning) return {.error = "connection refused"};
  return {.reachable = true,
          .state = sim.serving && !sim.read_only ? sharemanager::v1::SERVING
                                                 : sharemanager::v1::DEGRADED,
          .reason = sim.read_only ? "export filesystem is read-only" : "",
          .read_only = sim.read_only,
          .handled_generation = sim.handled_generation,
          .epoch = sim.pod.epoch};
}

absl::StatusOr<uint64_t> SimulatedCluster::Mount(const Pod& pod, uint64_t epoch,
                                                 uint64_t generation) {
  const Fault fault = rpc_faults_.Next();
  std::lock_guard lock(mu_);
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
  if (generation > sim.handled_generation) {
    sim.handled_generation = generation;
    sim.read_only = false;  // the remount repaired it
  }
  if (fault == Fault::kTimeoutAfter) return absl::DeadlineExceededError("Mount: deadline exceeded");
  return sim.handled_generation;
}

void SimulatedCluster::Kill(const std::string& name, int exit_code) {
  std::string volume;
  {
    std::lock_guard lock(mu_);
    auto it = pods_.find(name);
    if (it == pods_.end()) return;
    it->second.pod.phase = exit_code == 0 ? PodPhase::kSucceeded : PodPhase::kFailed;
    it->second.pod.exit_code = exit_code;
    volume = it->second.pod.volume;
  }
  listeners_.Notify(volume);
}

void SimulatedCluster::Freeze(const std::string& name, bool frozen) {
  std::lock_guard lock(mu_);
  if (auto it = pods_.find(name); it != pods_.end()) it->second.frozen = frozen;
}

void SimulatedCluster::SetReadOnly(const std::string& name, bool read_only) {
  std::lock_guard lock(mu_);
  if (auto it = pods_.find(name); it != pods_.end()) it->second.read_only = read_only;
}

std::vector<SimulatedCluster::SimPod> SimulatedCluster::Pods(const std::string& volume) const {
  std::lock_guard lock(mu_);
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
