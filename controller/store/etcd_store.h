// A Store in etcd, so several controllers (one leading) share the records
// and any of them can carry on after another dies. Each record is a key,
// PREFIX/shares/NAME, holding the record as JSON (as MemoryStore's file
// does; readable with etcdctl); its resource_version is the key's
// mod_revision. Every write is one Txn whose compares make it conditional:
// a Create on the key being absent, an Update on its mod_revision being the
// record's resource_version (else ABORTED, the conflict), and each on the
// write guard, when one is set, still holding.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "controller/core/listeners.h"
#include "controller/store/etcd_watcher.h"
#include "controller/store/store.h"
#include "etcd/client.h"

namespace controller {

// A condition on another etcd key that every write of an EtcdStore carries.
// A leader sets its election key's revision: once that key is gone or
// another candidate's, its writes fail (FAILED_PRECONDITION "not leader: ...",
// never a conflict) instead of overwriting the new leader's.
struct WriteGuard {
  enum class Field { kCreateRevision, kModRevision };
  std::string key;  // the whole etcd key (not under the store's prefix)
  Field field = Field::kCreateRevision;
  // The key's `field` must still be this (an absent key's are 0).
  int64_t revision = 0;
};

// Adds the guard's compare to a write's Txn: it succeeds only while the
// guard holds. (EtcdStore's every write; the lease simulation's model of
// etcd applies the same compares.)
void AddGuardCompare(etcdserverpb::TxnRequest& txn, const WriteGuard& guard);

// The write was refused because its WriteGuard no longer holds.
inline bool IsNotLeader(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition;
}

class EtcdStore final : public Store {
 public:
  // Lists the records' keys (the watch starts after that revision).
  // UNAVAILABLE when no member answers.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Open(std::shared_ptr<etcd::EtcdClient> client,
                                                         std::string prefix);
  // Stops the watcher: no listener is called after.
  ~EtcdStore() override;

  absl::StatusOr<ShareRecord> Get(const std::string& name) override;
  absl::StatusOr<std::vector<ShareRecord>> List() override;
  absl::StatusOr<ShareRecord> Create(ShareRecord record) override;
  absl::StatusOr<ShareRecord> Update(const ShareRecord& record) override;
  absl::Status Delete(const std::string& name) override;
  // Listeners are called on the store's watcher thread (started by the first
  // Watch), for every change in etcd after Open, by any writer: this store's
  // writes are heard after they return, not during. After a compaction lost
  // changes, every name is reported.
  void Watch(Listener listener) override;

  // Every write that starts after this carries `guard` (nullopt: none).
  void SetWriteGuard(std::optional<WriteGuard> guard);

  // The connection, shared with what else uses this etcd (leader election).
  const std::shared_ptr<etcd::EtcdClient>& client() const { return client_; }
  // The member the watch stream is open on; "" when none. For logs and tests.
  std::string WatchEndpoint() const;

 private:
  EtcdStore(std::shared_ptr<etcd::EtcdClient> client, std::string prefix)
      : client_(std::move(client)), records_prefix_(std::move(prefix) + "/shares/") {}

  std::string Key(const std::string& name) const { return records_prefix_ + name; }
  absl::StatusOr<ShareRecord> Decode(const mvccpb::KeyValue& kv) const;
  // Runs `txn` with the guard's compare added first (and a read of its key
  // on failure, first). NotLeader when the guard failed; otherwise etcd's
  // answer, the failure's reads after the guard's.
  absl::StatusOr<etcdserverpb::TxnResponse> GuardedTxn(etcdserverpb::TxnRequest txn);

  const std::shared_ptr<etcd::EtcdClient> client_;
  const std::string records_prefix_;
  Listeners listeners_;

  mutable absl::Mutex mu_;
  std::optional<WriteGuard> guard_ ABSL_GUARDED_BY(mu_);
  // Where the watcher starts: the revision Open listed at, and the keys then.
  int64_t opened_revision_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> opened_keys_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<EtcdWatcher> watcher_ ABSL_GUARDED_BY(mu_);
};

}  // namespace controller
