#include "controller/ha/leader_gate.h"

#include "absl/strings/str_cat.h"
#include "controller/store/etcd_store.h"

namespace controller {

absl::Status NotLeaderError(const std::string& why) {
  return absl::FailedPreconditionError(absl::StrCat("not leader: ", why));
}

absl::Status LeaderGatedRuntime::Gate(const std::string& action) {
  if (leading_()) return absl::OkStatus();
  const std::string why =
      absl::StrCat("refused to ", action, ": the leadership is no longer valid on this clock");
  if (deposed_) deposed_(why);
  return NotLeaderError(why);
}

absl::StatusOr<Pod> LeaderGatedRuntime::Create(const sharemanager::controller::v1::ShareSpec& spec,
                                               uint64_t epoch) {
  if (auto s = Gate(absl::StrCat("create the pod of ", spec.volume(), " epoch ", epoch)); !s.ok()) {
    return s;
  }
  return runtime_.Create(spec, epoch);
}

absl::Status LeaderGatedRuntime::Delete(const std::string& pod) {
  if (auto s = Gate(absl::StrCat("delete pod ", pod)); !s.ok()) return s;
  return runtime_.Delete(pod);
}

absl::Status LeaderStore::Noticed(absl::Status status) {
  if (IsNotLeader(status) && deposed_) {
    deposed_(absl::StrCat("a store write was refused: ", status.message()));
  }
  return status;
}

absl::StatusOr<ShareRecord> LeaderStore::Create(ShareRecord record) {
  auto created = store_.Create(std::move(record));
  if (!created.ok()) return Noticed(created.status());
  return created;
}

absl::StatusOr<ShareRecord> LeaderStore::Update(const ShareRecord& record) {
  auto updated = store_.Update(record);
  if (!updated.ok()) return Noticed(updated.status());
  return updated;
}

absl::Status LeaderStore::Delete(const std::string& name) { return Noticed(store_.Delete(name)); }

}  // namespace controller
