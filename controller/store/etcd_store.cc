#include "controller/store/etcd_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "controller/store/share_records.h"

namespace controller {
namespace {

using etcdserverpb::Compare;
using etcdserverpb::TxnRequest;

Compare KeyCompare(const std::string& key, Compare::CompareTarget target, int64_t revision) {
  Compare compare;
  compare.set_key(key);
  compare.set_target(target);
  compare.set_result(Compare::EQUAL);
  if (target == Compare::CREATE) {
    compare.set_create_revision(revision);
  } else {
    compare.set_mod_revision(revision);
  }
  return compare;
}

void AddRead(google::protobuf::RepeatedPtrField<etcdserverpb::RequestOp>& ops,
             const std::string& key) {
  auto& range = *ops.Add()->mutable_request_range();
  range.set_key(key);
  range.set_keys_only(true);
}

void AddPut(TxnRequest& txn, const std::string& key, const std::string& value) {
  auto& put = *txn.add_success()->mutable_request_put();
  put.set_key(key);
  put.set_value(value);
}

// The value a record is kept as: without its resource_version, which is the
// key's mod_revision, known only once written.
absl::StatusOr<std::string> Encode(ShareRecord record) {
  record.clear_resource_version();
  return RecordToJson(record);
}

const etcdserverpb::RangeResponse& Read(const etcdserverpb::TxnResponse& response, int i) {
  return response.responses(i).response_range();
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(std::shared_ptr<etcd::EtcdClient> client,
                                                           std::string prefix) {
  std::unique_ptr<EtcdStore> store(new EtcdStore(std::move(client), std::move(prefix)));
  auto listing = etcd::ListPrefix(*store->client_, store->records_prefix_, /*keys_only=*/true);
  if (!listing.ok()) return listing.status();
  absl::MutexLock lock(&store->mu_);
  store->opened_revision_ = listing->revision;
  for (const auto& kv : listing->kvs) store->opened_keys_.insert(kv.key());
  return store;
}

EtcdStore::~EtcdStore() {
  std::unique_ptr<EtcdWatcher> watcher;
  {
    absl::MutexLock lock(&mu_);
    watcher = std::move(watcher_);
  }
  // Joined outside the lock: a listener may be calling into this store.
  watcher.reset();
}

std::string EtcdStore::WatchEndpoint() const {
  absl::MutexLock lock(&mu_);
  return watcher_ ? watcher_->endpoint() : "";
}

absl::StatusOr<ShareRecord> EtcdStore::Decode(const mvccpb::KeyValue& kv) const {
  auto record = RecordFromJson(kv.value());
  if (!record.ok()) {
    return absl::DataLossError(
        absl::StrCat("etcd key ", kv.key(), ": ", record.status().message()));
  }
  if (Key(record->name()) != kv.key()) {
    return absl::DataLossError(
        absl::StrCat("etcd key ", kv.key(), " holds the record of share ", record->name()));
  }
  record->set_resource_version(static_cast<uint64_t>(kv.mod_revision()));
  return record;
}

absl::StatusOr<ShareRecord> EtcdStore::Get(const std::string& name) {
  etcdserverpb::RangeRequest request;
  request.set_key(Key(name));
  auto response = client_->Range(request);
  if (!response.ok()) return response.status();
  if (response->kvs().empty()) return ShareNotFound(name);
  return Decode(response->kvs(0));
}

absl::StatusOr<std::vector<ShareRecord>> EtcdStore::List() {
  auto listing = etcd::ListPrefix(*client_, records_prefix_, /*keys_only=*/false);
  if (!listing.ok()) return listing.status();
  std::vector<ShareRecord> records;
  records.reserve(listing->kvs.size());
  for (const auto& kv : listing->kvs) {
    auto record = Decode(kv);
    if (!record.ok()) return record.status();
    records.push_back(*std::move(record));
  }
  return records;
}

void AddGuardCompare(TxnRequest& txn, const WriteGuard& guard) {
  const auto target =
      guard.field == WriteGuard::Field::kCreateRevision ? Compare::CREATE : Compare::MOD;
  *txn.add_compare() = KeyCompare(guard.key, target, guard.revision);
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdStore::GuardedTxn(TxnRequest txn) {
  std::optional<WriteGuard> guard;
  {
    absl::MutexLock lock(&mu_);
    guard = guard_;
  }
  if (!guard) return client_->Txn(txn);
  const auto target =
      guard->field == WriteGuard::Field::kCreateRevision ? Compare::CREATE : Compare::MOD;
  AddGuardCompare(txn, *guard);
  // The guard key's read first among the failure's, at a known place.
  google::protobuf::RepeatedPtrField<etcdserverpb::RequestOp> failure;
  AddRead(failure, guard->key);
  for (auto& op : *txn.mutable_failure()) *failure.Add() = std::move(op);
  txn.mutable_failure()->Swap(&failure);
  auto response = client_->Txn(txn);
  if (!response.ok() || response->succeeded()) return response;
  const auto& guard_read = Read(*response, 0);
  const int64_t now = guard_read.kvs().empty()    ? 0
                      : target == Compare::CREATE ? guard_read.kvs(0).create_revision()
                                                  : guard_read.kvs(0).mod_revision();
  if (now != guard->revision) {
    return absl::FailedPreconditionError(
        absl::StrCat("not leader: the write guard's etcd key ", guard->key, " has ",
                     target == Compare::CREATE ? "create_revision " : "mod_revision ", now,
                     ", not ", guard->revision));
  }
  response->mutable_responses()->erase(response->mutable_responses()->begin());
  return response;
}

absl::StatusOr<ShareRecord> EtcdStore::Create(ShareRecord record) {
  record = CreatedRecord(std::move(record));
  auto value = Encode(record);
  if (!value.ok()) return value.status();
  const std::string key = Key(record.name());
  TxnRequest txn;
  *txn.add_compare() = KeyCompare(key, Compare::CREATE, 0);  // absent
  AddPut(txn, key, *value);
  auto response = GuardedTxn(std::move(txn));
  if (!response.ok()) return response.status();
  if (!response->succeeded()) return ShareExists(record.name());
  record.set_resource_version(static_cast<uint64_t>(response->header().revision()));
  return record;
}

absl::StatusOr<ShareRecord> EtcdStore::Update(const ShareRecord& record) {
  // The spec_generation depends on the stored spec: read it first, then
  // write only if that is still what is stored.
  auto current = Get(record.name());
  if (!current.ok()) return current.status();
  if (auto s = CheckVersion(*current, record); !s.ok()) return s;
  ShareRecord stored = UpdatedRecord(*current, record);
  auto value = Encode(stored);
  if (!value.ok()) return value.status();
  const std::string key = Key(record.name());
  TxnRequest txn;
  *txn.add_compare() =
      KeyCompare(key, Compare::MOD, static_cast<int64_t>(record.resource_version()));
  AddPut(txn, key, *value);
  AddRead(*txn.mutable_failure(), key);
  auto response = GuardedTxn(std::move(txn));
  if (!response.ok()) return response.status();
  if (!response->succeeded()) {
    // Changed or deleted since it was read.
    const auto& now = Read(*response, 0);
    if (now.kvs().empty()) return ShareNotFound(record.name());
    current->set_resource_version(static_cast<uint64_t>(now.kvs(0).mod_revision()));
    return CheckVersion(*current, record);
  }
  stored.set_resource_version(static_cast<uint64_t>(response->header().revision()));
  return stored;
}

absl::Status EtcdStore::Delete(const std::string& name) {
  TxnRequest txn;
  txn.add_success()->mutable_request_delete_range()->set_key(Key(name));
  auto response = GuardedTxn(std::move(txn));
  if (!response.ok()) return response.status();
  if (response->responses(0).response_delete_range().deleted() == 0) return ShareNotFound(name);
  return absl::OkStatus();
}

void EtcdStore::Watch(Listener listener) {
  listeners_.Add(std::move(listener));
  absl::MutexLock lock(&mu_);
  if (watcher_) return;
  watcher_ =
      std::make_unique<EtcdWatcher>(*client_, records_prefix_, opened_revision_ + 1, opened_keys_,
                                    [this](const std::string& key) {
                                      if (absl::StartsWith(key, records_prefix_)) {
                                        listeners_.Notify(key.substr(records_prefix_.size()));
                                      }
                                    });
}

void EtcdStore::SetWriteGuard(std::optional<WriteGuard> guard) {
  absl::MutexLock lock(&mu_);
  guard_ = std::move(guard);
}

}  // namespace controller
