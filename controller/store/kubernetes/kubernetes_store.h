// A Store over ShareManager objects (deploy/base/crd.yaml) in one namespace
// of a Kubernetes cluster: the records are API objects, so `kubectl` shows
// and edits them, and every controller replica shares them.
//
// - Reads come from an informer (list + watch, kube/informer.h), not from a
//   request per read: the steady state costs one watch, whatever the number
//   of shares and passes.
// - A write's result is what this store reads back until the informer has
//   seen that resourceVersion, so a pass never reads older than its own write.
// - Writes are conditional on the record's resource_version (the object's
//   metadata.resourceVersion): a stale one is the apiserver's 409, ABORTED.
//   The spec and the finalizer go to the object, the status to /status.
// - Delete asks the apiserver to delete; while a pod may exist the
//   finalizer (status.hold_record) keeps the object, with deletion_requested
//   set, until the reconciler lets it go.
// - Listeners are called on the informer's thread, for every change by any
//   writer (this store's writes after they return), and on each resync.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "controller/core/listeners.h"
#include "controller/store/store.h"
#include "kube/client.h"
#include "kube/informer.h"

namespace controller::kubernetes {

struct KubernetesStoreOptions {
  std::string namespace_name;
  // Open waits this long for the first list.
  absl::Duration sync_timeout = absl::Seconds(30);
  // Every share reported to the listeners again this often (informer resync).
  std::chrono::seconds resync_period{300};
};

class KubernetesStore final : public Store {
 public:
  // Starts following the namespace's ShareManagers and waits for the first
  // list: UNAVAILABLE naming the apiserver's answer when it does not come.
  // `client` must outlive the store.
  static absl::StatusOr<std::unique_ptr<KubernetesStore>> Open(kube::Client& client,
                                                               KubernetesStoreOptions options);
  // Stops the informer: no listener is called after.
  ~KubernetesStore() override;

  absl::StatusOr<ShareRecord> Get(const std::string& name) override;
  absl::StatusOr<std::vector<ShareRecord>> List() override;
  absl::StatusOr<ShareRecord> Create(ShareRecord record) override;
  absl::StatusOr<ShareRecord> Update(const ShareRecord& record) override;
  absl::Status Delete(const std::string& name) override;
  void Watch(Listener listener) override;

  // The UID of the share's object ("" when this store holds none): what
  // Events about it name.
  std::string Uid(const std::string& name);
  // Whether the shares it reads are current: kube::Informer::Health.
  absl::Status Health() const;

 private:
  // The object as this store last wrote it, until the informer catches up.
  struct Written {
    uint64_t resource_version = 0;
    nlohmann::json object;  // null: deleted
    // Deleted: the UID of the object that went. The informer may never see
    // that version (a re-list after 410 skips it), so the entry goes once
    // the informer holds no object of that UID.
    std::string deleted_uid;
  };

  KubernetesStore(kube::Client& client, KubernetesStoreOptions options);
  std::string Path(const std::string& name = "", const std::string& subresource = "") const;
  // The newest object known for `name`: this store's last write or the
  // informer's; null when there is none.
  nlohmann::json Latest(const std::string& name);
  // Remembers a write's result.
  void Wrote(const std::string& name, nlohmann::json object);
  void WroteDeleted(const std::string& name, std::string uid);
  // Whether the informer has caught up with `written` (`cached`: its object).
  bool Superseded(const Written& written, const std::optional<nlohmann::json>& cached,
                  uint64_t seen) const;
  void OnChange(const std::string& key);

  kube::Client& client_;
  const KubernetesStoreOptions options_;
  Listeners listeners_;
  absl::Mutex mu_;
  std::map<std::string, Written> written_ ABSL_GUARDED_BY(mu_);
  // Last: it calls OnChange until it is stopped, first, in the destructor.
  std::unique_ptr<kube::Informer> informer_;
};

}  // namespace controller::kubernetes
