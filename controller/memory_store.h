// An in-memory Store, optionally persisted to a file (one JSON record per
// line, rewritten atomically on every change) so a controller can restart.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "controller/listeners.h"
#include "controller/store.h"

namespace controller {

class MemoryStore final : public Store {
 public:
  MemoryStore() = default;
  // Loads `path` when it exists; every change is written back to it.
  static absl::StatusOr<std::unique_ptr<MemoryStore>> OpenFile(const std::string& path);

  absl::StatusOr<ShareRecord> Get(const std::string& name) override;
  absl::StatusOr<std::vector<ShareRecord>> List() override;
  absl::StatusOr<ShareRecord> Create(ShareRecord record) override;
  absl::StatusOr<ShareRecord> Update(const ShareRecord& record) override;
  absl::Status Delete(const std::string& name) override;
  void Watch(Listener listener) override;

 private:
  absl::Status PersistLocked() const;

  std::mutex mu_;
  std::unordered_map<std::string, ShareRecord> records_;
  uint64_t version_ = 0;
  std::string path_;
  Listeners listeners_;
};

}  // namespace controller
