#include "controller/store/memory_store.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "controller/store/share_records.h"

namespace controller {

absl::StatusOr<std::unique_ptr<MemoryStore>> MemoryStore::OpenFile(const std::string& path) {
  auto store = std::make_unique<MemoryStore>();
  store->path_ = path;
  // Only a missing file is an empty store: starting empty over records that
  // exist but could not be read would forget every share and its epoch.
  auto content = base::ReadFile(path);
  if (absl::IsNotFound(content.status())) return store;
  if (!content.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load the store file: ", content.status().message()));
  }
  int line_no = 0;
  const std::vector<std::string> lines = absl::StrSplit(*content, '\n');
  // No other thread sees the store yet; locked all the same, as every access is.
  absl::MutexLock lock(&store->mu_);
  for (const std::string& line : lines) {
    ++line_no;
    if (line.empty()) continue;
    auto record = RecordFromJson(line);
    if (!record.ok()) {
      return absl::DataLossError(absl::StrCat(path, ":", line_no, ": ", record.status().message()));
    }
    store->version_ = std::max(store->version_, record->resource_version());
    store->records_[record->name()] = *std::move(record);
  }
  return store;
}

absl::Status MemoryStore::PersistLocked() const {
  if (path_.empty()) return absl::OkStatus();
  std::string content;
  for (const auto& [name, record] : records_) {
    auto json = RecordToJson(record);
    if (!json.ok()) return json.status();
    absl::StrAppend(&content, *json, "\n");
  }
  // fsynced and renamed: after a crash the file holds the last acknowledged
  // write or the one before, never a torn mix (an epoch must never go back).
  auto s = base::WriteFileAtomically(path_, content);
  if (!s.ok()) return absl::UnavailableError(s.message());
  return absl::OkStatus();
}

absl::StatusOr<ShareRecord> MemoryStore::Get(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = records_.find(name);
  if (it == records_.end()) return ShareNotFound(name);
  return it->second;
}

absl::StatusOr<std::vector<ShareRecord>> MemoryStore::List() {
  absl::MutexLock lock(&mu_);
  std::vector<ShareRecord> out;
  out.reserve(records_.size());
  for (const auto& [name, record] : records_) out.push_back(record);
  return out;
}

absl::StatusOr<ShareRecord> MemoryStore::Create(ShareRecord record) {
  {
    absl::MutexLock lock(&mu_);
    if (records_.contains(record.name())) return ShareExists(record.name());
    record = CreatedRecord(std::move(record));
    record.set_resource_version(++version_);
    records_[record.name()] = record;
    if (auto s = PersistLocked(); !s.ok()) {
      records_.erase(record.name());
      return s;
    }
  }
  listeners_.Notify(record.name());
  return record;
}

absl::StatusOr<ShareRecord> MemoryStore::Update(const ShareRecord& record) {
  ShareRecord stored;
  {
    absl::MutexLock lock(&mu_);
    auto it = records_.find(record.name());
    if (it == records_.end()) return ShareNotFound(record.name());
    if (auto s = CheckVersion(it->second, record); !s.ok()) return s;
    stored = UpdatedRecord(it->second, record);
    stored.set_resource_version(++version_);
    ShareRecord previous = std::exchange(it->second, stored);
    if (auto s = PersistLocked(); !s.ok()) {
      it->second = std::move(previous);
      return s;
    }
  }
  listeners_.Notify(record.name());
  return stored;
}

absl::Status MemoryStore::Delete(const std::string& name) {
  {
    absl::MutexLock lock(&mu_);
    auto it = records_.find(name);
    if (it == records_.end()) return ShareNotFound(name);
    ShareRecord previous = std::move(it->second);
    records_.erase(it);
    if (auto s = PersistLocked(); !s.ok()) {
      records_[name] = std::move(previous);
      return s;
    }
  }
  listeners_.Notify(name);
  return absl::OkStatus();
}

void MemoryStore::Watch(Listener listener) { listeners_.Add(std::move(listener)); }

}  // namespace controller
