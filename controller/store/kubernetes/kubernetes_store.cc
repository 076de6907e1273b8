#include "controller/store/kubernetes/kubernetes_store.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "controller/store/kubernetes/share_object.h"
#include "kube/object.h"
#include "kube/paths.h"

namespace controller::kubernetes {
namespace {

using nlohmann::json;

std::string UidOf(const json& object) { return kube::MetadataString(object, "uid"); }

// A record the object can no longer be read as: the object is gone once
// nothing holds it (deleted while no finalizer was left).
bool Gone(const ShareRecord& record) {
  return record.deletion_requested() && !record.status().hold_record();
}

bool SameSpec(const ShareRecord& a, const ShareRecord& b) {
  return a.spec().serve() == b.spec().serve() &&
         std::equal(a.spec().daemon_flags().begin(), a.spec().daemon_flags().end(),
                    b.spec().daemon_flags().begin(), b.spec().daemon_flags().end()) &&
         a.status().hold_record() == b.status().hold_record();
}

}  // namespace

absl::StatusOr<std::unique_ptr<KubernetesStore>> KubernetesStore::Open(
    kube::Client& client, KubernetesStoreOptions options) {
  std::unique_ptr<KubernetesStore> store(new KubernetesStore(client, std::move(options)));
  store->informer_ = std::make_unique<kube::Informer>(
      client,
      kube::InformerOptions{.path = store->Path(), .resync_period = store->options_.resync_period},
      [s = store.get()](const std::string& key) { s->OnChange(key); });
  store->informer_->Start();
  if (!store->informer_->WaitForSync(store->options_.sync_timeout)) {
    // The first list's answer says why: try it once more, for the message.
    const auto listed = client.List(store->Path());
    return absl::UnavailableError(absl::StrCat(
        "listing ", kResource, " in namespace ", store->options_.namespace_name, " at ",
        client.config().server, ": ",
        listed.ok() ? "no answer within the sync timeout" : listed.status().ToString()));
  }
  return store;
}

KubernetesStore::KubernetesStore(kube::Client& client, KubernetesStoreOptions options)
    : client_(client), options_(std::move(options)) {}

KubernetesStore::~KubernetesStore() {
  if (informer_) informer_->Stop();
}

std::string KubernetesStore::Path(const std::string& name, const std::string& subresource) const {
  return kube::ResourcePath({.group = kGroup,
                             .version = kVersion,
                             .namespace_name = options_.namespace_name,
                             .plural = kResource,
                             .name = name,
                             .subresource = subresource});
}

bool KubernetesStore::Superseded(const Written& written, const std::optional<json>& cached,
                                 uint64_t seen) const {
  if (written.object.is_null()) {
    // Without the UID (an apiserver that did not say), only the object's
    // absence from the cache ends the tombstone.
    return !cached || (!written.deleted_uid.empty() && UidOf(*cached) != written.deleted_uid);
  }
  // Once the informer has seen the write's version, its cache has the write
  // or what came after it.
  return seen >= written.resource_version;
}

json KubernetesStore::Latest(const std::string& name) {
  // The version first: the cache read after it is at least that new, so a
  // write it covers is in what the cache gives.
  const uint64_t seen = kube::VersionNumber(informer_->ResourceVersion());
  auto cached = informer_->Get(absl::StrCat(options_.namespace_name, "/", name));
  absl::MutexLock lock(&mu_);
  if (const auto it = written_.find(name); it != written_.end()) {
    if (!Superseded(it->second, cached, seen)) return it->second.object;
    written_.erase(it);
  }
  return cached ? *std::move(cached) : json();
}

void KubernetesStore::Wrote(const std::string& name, json object) {
  // The write that let a deleted object go answers with the object as it
  // was when it went, whose version is no newer than the write before it:
  // it is a deletion, and is remembered as one.
  if (auto record = RecordFromObject(object); record.ok() && Gone(*record)) {
    WroteDeleted(name, UidOf(object));
    return;
  }
  const uint64_t version = kube::VersionNumber(object);
  absl::MutexLock lock(&mu_);
  // Two writers in this process: the newer answer stays.
  if (const auto it = written_.find(name); it != written_.end() && !it->second.object.is_null() &&
                                           it->second.resource_version > version) {
    return;
  }
  written_[name] = {.resource_version = version, .object = std::move(object)};
}

void KubernetesStore::WroteDeleted(const std::string& name, std::string uid) {
  absl::MutexLock lock(&mu_);
  written_[name] = {.deleted_uid = std::move(uid)};
}

void KubernetesStore::OnChange(const std::string& key) {
  const std::string prefix = options_.namespace_name + "/";
  if (key.rfind(prefix, 0) != 0) return;
  const std::string name = key.substr(prefix.size());
  {
    const uint64_t seen = kube::VersionNumber(informer_->ResourceVersion());
    const auto cached = informer_->Get(key);
    absl::MutexLock lock(&mu_);
    if (const auto it = written_.find(name);
        it != written_.end() && Superseded(it->second, cached, seen)) {
      written_.erase(it);
    }
  }
  listeners_.Notify(name);
}

absl::StatusOr<ShareRecord> KubernetesStore::Get(const std::string& name) {
  const json object = Latest(name);
  if (object.is_null()) {
    return absl::NotFoundError(absl::StrCat(kKind, " ", options_.namespace_name, "/", name));
  }
  auto record = RecordFromObject(object);
  if (record.ok() && Gone(*record)) {
    return absl::NotFoundError(absl::StrCat(kKind, " ", options_.namespace_name, "/", name));
  }
  return record;
}

absl::StatusOr<std::vector<ShareRecord>> KubernetesStore::List() {
  std::map<std::string, bool> names;
  for (const json& object : informer_->List()) names[kube::MetadataString(object, "name")] = true;
  names.erase("");
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, written] : written_) names[name] = true;
  }
  std::vector<ShareRecord> records;
  for (const auto& [name, unused] : names) {
    auto record = Get(name);
    // An object that cannot be a record is reported by its own Get, in its
    // share's pass; it must not hide the other shares.
    if (record.ok()) records.push_back(*std::move(record));
  }
  return records;
}

absl::StatusOr<ShareRecord> KubernetesStore::Create(ShareRecord record) {
  if (record.spec().volume() != record.name()) {
    return absl::InvalidArgumentError(absl::StrCat(kKind, " ", record.name(),
                                                   ": the volume must be the object's name, not '",
                                                   record.spec().volume(), "'"));
  }
  auto created = client_.Create(Path(), NewObject(record, options_.namespace_name));
  if (!created.ok()) return created.status();
  if (record.status().ByteSizeLong() > 0) {
    // A status is never created with the object: it goes to /status.
    auto stored = RecordFromObject(*created);
    if (!stored.ok()) return stored.status();
    record.set_resource_version(stored->resource_version());
    record.mutable_status()->set_hold_record(stored->status().hold_record());
    auto with_status = client_.Replace(Path(record.name(), "status"), WithStatus(*created, record));
    if (!with_status.ok()) return with_status.status();
    created = std::move(with_status);
  }
  auto stored = RecordFromObject(*created);
  if (stored.ok()) Wrote(record.name(), *created);
  return stored;
}

absl::StatusOr<ShareRecord> KubernetesStore::Update(const ShareRecord& record) {
  json object = Latest(record.name());
  if (object.is_null()) {
    return absl::NotFoundError(
        absl::StrCat(kKind, " ", options_.namespace_name, "/", record.name()));
  }
  auto current = RecordFromObject(object);
  if (!current.ok()) return current.status();
  // The spec and the finalizer are the object's, the status is /status':
  // two writes, each conditional on the version the one before left. A
  // finalizer being added goes first (held before the status that lets a
  // pod be made), one being removed last (let go only after that status).
  const bool spec_changes = !SameSpec(*current, record);
  const bool releases = current->status().hold_record() && !record.status().hold_record();
  ShareRecord next = record;
  auto write = [&](bool status) -> absl::Status {
    auto written = status ? client_.Replace(Path(record.name(), "status"), WithStatus(object, next))
                          : client_.Replace(Path(record.name()), WithSpec(object, next));
    if (!written.ok()) return written.status();
    object = *std::move(written);
    next.set_resource_version(kube::VersionNumber(object));
    // Each write that went through is read back, even when the next fails.
    Wrote(record.name(), object);
    return absl::OkStatus();
  };
  if (spec_changes && !releases) {
    if (auto s = write(false); !s.ok()) return s;
  }
  // Always written (an unchanged one is a no-op for the apiserver), so a
  // stale resource_version is refused even when nothing else changed.
  if (auto s = write(true); !s.ok()) return s;
  if (spec_changes && releases) {
    if (auto s = write(false); !s.ok()) return s;
  }
  return RecordFromObject(object);
}

absl::Status KubernetesStore::Delete(const std::string& name) {
  auto answer = client_.Delete(Path(name));
  if (!answer.ok()) return answer.status();
  // The object, while a finalizer holds it (deletionTimestamp set), or a
  // Status naming the UID of the one that went.
  if (kube::StringAt(*answer, {"kind"}) == kKind) {
    Wrote(name, *std::move(answer));
  } else {
    WroteDeleted(name, kube::StringAt(*answer, {"details", "uid"}));
  }
  return absl::OkStatus();
}

void KubernetesStore::Watch(Listener listener) { listeners_.Add(std::move(listener)); }

std::string KubernetesStore::Uid(const std::string& name) { return UidOf(Latest(name)); }

absl::Status KubernetesStore::Health() const { return informer_->Health(); }

}  // namespace controller::kubernetes
