// An in-memory Store, optionally persisted to a file (one JSON record per
// line, rewritten atomically and fsynced on every change) so a controller can
// restart.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "controller/core/listeners.h"
#include "controller/store/store.h"

namespace controller {

class MemoryStore final : public Store {
 public:
  MemoryStore() = default;
  // Loads `path`; a missing file is an empty store, any other failure to read
  // it (not a regular file, EACCES, EIO, a bad line) is an error naming it.
  // Every change is written back to it. Does not lock it: one process per
  // file is the caller's to ensure (share-controller flocks <path>.lock).
  static absl::StatusOr<std::unique_ptr<MemoryStore>> OpenFile(const std::string& path);

  absl::StatusOr<ShareRecord> Get(const std::string& name) override;
  absl::StatusOr<std::vector<ShareRecord>> List() override;
  absl::StatusOr<ShareRecord> Create(ShareRecord record) override;
  absl::StatusOr<ShareRecord> Update(const ShareRecord& record) override;
  absl::Status Delete(const std::string& name) override;
  void Watch(Listener listener) override;

 private:
  absl::Status PersistLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::unordered_map<std::string, ShareRecord> records_ ABSL_GUARDED_BY(mu_);
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  std::string path_;
  Listeners listeners_;
};

}  // namespace controller
