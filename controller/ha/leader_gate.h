// What a leading share-controller replica acts through (docs/DESIGN-NOTES.md "Highly
// available share-controller"): every pod Create and Delete is gated on its
// leadership being valid right then (valid_until > now on its own monotonic
// clock, checked right before the action), and a store write refused as not
// leader (the EtcdStore's write guard failed: another replica leads now) is
// reported. Either means the replica was deposed: `deposed` is told, and the
// replica stops (share-controller exits kExitNotLeader, leaving its pods).
#pragma once

#include <functional>
#include <string>

#include "controller/runtime/pod_runtime.h"
#include "controller/store/store.h"

namespace controller {

using DeposedHook = std::function<void(const std::string& why)>;

// FAILED_PRECONDITION "not leader: ...", as the write guard's refusal.
absl::Status NotLeaderError(const std::string& why);

class LeaderGatedRuntime final : public PodRuntime {
 public:
  // `leading`: whether this replica may act now (LeaderElection::LeadingAt
  // on its clock's now). `deposed`: told of each refusal. Both from any
  // thread that calls Create or Delete.
  LeaderGatedRuntime(PodRuntime& runtime, std::function<bool()> leading, DeposedHook deposed)
      : runtime_(runtime), leading_(std::move(leading)), deposed_(std::move(deposed)) {}

  // Refused with NotLeaderError, the runtime untouched, unless leading now.
  absl::StatusOr<Pod> Create(const sharemanager::controller::v1::ShareSpec& spec,
                             uint64_t epoch) override;
  absl::Status Delete(const std::string& pod) override;
  // Observing needs no leadership.
  absl::StatusOr<std::vector<Pod>> List(const std::string& volume) override {
    return runtime_.List(volume);
  }
  void Watch(Listener listener) override { runtime_.Watch(std::move(listener)); }
  absl::StatusOr<StartCheck> CheckStart(const sharemanager::controller::v1::ShareSpec& spec,
                                        uint64_t epoch) override {
    return runtime_.CheckStart(spec, epoch);
  }

 private:
  // OK when leading; else tells `deposed_` and returns why not.
  absl::Status Gate(const std::string& action);

  PodRuntime& runtime_;
  const std::function<bool()> leading_;
  const DeposedHook deposed_;
};

// The store as a leader writes it: every call goes to `store`; a write
// refused as not leader (IsNotLeader) also tells `deposed`.
class LeaderStore final : public Store {
 public:
  LeaderStore(Store& store, DeposedHook deposed) : store_(store), deposed_(std::move(deposed)) {}

  absl::StatusOr<ShareRecord> Get(const std::string& name) override { return store_.Get(name); }
  absl::StatusOr<std::vector<ShareRecord>> List() override { return store_.List(); }
  absl::StatusOr<ShareRecord> Create(ShareRecord record) override;
  absl::StatusOr<ShareRecord> Update(const ShareRecord& record) override;
  absl::Status Delete(const std::string& name) override;
  void Watch(Listener listener) override { store_.Watch(std::move(listener)); }

 private:
  // Tells `deposed_` when `status` is a not-leader refusal; returns it.
  absl::Status Noticed(absl::Status status);

  Store& store_;
  const DeposedHook deposed_;
};

}  // namespace controller
