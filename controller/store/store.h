// Where share records live. Writes use optimistic concurrency: a write that
// carries a stale resource_version fails with a conflict (ABORTED).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sharemanager/controller/v1/share_record.pb.h"

namespace controller {

using ShareRecord = sharemanager::controller::v1::ShareRecord;

class Store {
 public:
  using Listener = std::function<void(const std::string& name)>;
  virtual ~Store() = default;

  // NotFound when absent.
  virtual absl::StatusOr<ShareRecord> Get(const std::string& name) = 0;
  virtual absl::StatusOr<std::vector<ShareRecord>> List() = 0;
  // AlreadyExists when present. The stored record (with its version) is returned.
  virtual absl::StatusOr<ShareRecord> Create(ShareRecord record) = 0;
  // Replaces the record when record.resource_version is current; bumps
  // spec_generation when the spec changed. Aborted (conflict) otherwise.
  virtual absl::StatusOr<ShareRecord> Update(const ShareRecord& record) = 0;
  virtual absl::Status Delete(const std::string& name) = 0;
  // Calls `listener` after every change: on the writer's thread, or on one
  // of the store's own (a store that hears changes by watching a server).
  virtual void Watch(Listener listener) = 0;
};

inline bool IsConflict(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted;
}

}  // namespace controller
