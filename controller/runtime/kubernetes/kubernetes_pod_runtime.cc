#include "controller/runtime/kubernetes/kubernetes_pod_runtime.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "controller/store/kubernetes/share_object.h"
#include "kube/object.h"
#include "kube/paths.h"

namespace controller::kubernetes {
namespace {

using nlohmann::json;

PodPhase PhaseOf(const std::string& phase) {
  if (phase == "Pending") return PodPhase::kPending;
  if (phase == "Running") return PodPhase::kRunning;
  if (phase == "Succeeded") return PodPhase::kSucceeded;
  if (phase == "Failed") return PodPhase::kFailed;
  // No phase yet (just created) is pending; anything else, unknown.
  return phase.empty() ? PodPhase::kPending : PodPhase::kUnknown;
}

// The share-manager container's status; an empty object before it has one.
json ContainerStatus(const json& pod) {
  const json statuses =
      pod.value("status", json::object()).value("containerStatuses", json::array());
  for (const auto& s : statuses) {
    if (s.is_object() && s.value("name", "") == kContainerName) return s;
  }
  return json::object();
}

absl::StatusOr<Pod> PodFromObjectOrThrow(const json& object, const PodTemplate& pod_template);

}  // namespace

absl::StatusOr<Pod> PodFromObject(const json& object, const PodTemplate& pod_template) {
  // value() throws on a field of another type than the one asked: a pod
  // the apiserver sent in a shape no apiserver sends is no pod of ours.
  try {
    return PodFromObjectOrThrow(object, pod_template);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("pod '", kube::MetadataString(object, "name"),
                                                   "' cannot be read: ", e.what()));
  }
}

namespace {

absl::StatusOr<Pod> PodFromObjectOrThrow(const json& object, const PodTemplate& pod_template) {
  const json metadata = object.value("metadata", json::object());
  const json labels = metadata.value("labels", json::object());
  Pod pod;
  pod.name = metadata.value("name", "");
  pod.volume = labels.value(kVolumeLabel, "");
  if (pod.name.empty() || pod.volume.empty() ||
      !absl::SimpleAtoi(labels.value(kEpochLabel, ""), &pod.epoch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pod '", pod.name, "' is no share-manager pod: labels ", kVolumeLabel, " and ",
                     kEpochLabel, " (a number) are needed"));
  }
  pod.uid = metadata.value("uid", "");
  pod.outdated = labels.value(kTemplateHashLabel, "") != pod_template.hash();
  pod.terminating =
      metadata.contains("deletionTimestamp") && !metadata["deletionTimestamp"].is_null();
  const json status = object.value("status", json::object());
  pod.phase = PhaseOf(status.value("phase", ""));
  if (const std::string ip = status.value("podIP", ""); !ip.empty()) {
    pod.endpoint = ip.find(':') == std::string::npos
                       ? absl::StrCat(ip, ":", pod_template.grpc_port())
                       : absl::StrCat("[", ip, "]:", pod_template.grpc_port());
  }
  pod.nfs_port = pod_template.nfs_port();
  const json container = ContainerStatus(object);
  const json state = container.value("state", json::object());
  if (const auto running = state.find("running"); running != state.end() && running->is_object()) {
    if (auto started = ParseTime(running->value("startedAt", "")); started.ok()) {
      pod.started_unix_ms = *started;
    }
  }
  if (const auto ended = state.find("terminated"); ended != state.end() && ended->is_object()) {
    pod.exit_code = ended->value("exitCode", 0);
    pod.termination_message = ended->value("message", "");
    // The message is share-manager's last line, newline and all.
    while (!pod.termination_message.empty() && pod.termination_message.back() == '\n') {
      pod.termination_message.pop_back();
    }
  }
  return pod;
}

}  // namespace

absl::StatusOr<std::unique_ptr<KubernetesPodRuntime>> KubernetesPodRuntime::Open(
    kube::Client& client, PodTemplate pod_template, KubernetesPodRuntimeOptions options) {
  std::unique_ptr<KubernetesPodRuntime> runtime(
      new KubernetesPodRuntime(client, std::move(pod_template), std::move(options)));
  runtime->informer_ = std::make_unique<kube::Informer>(
      client,
      kube::InformerOptions{.path = runtime->Path("pods"),
                            .label_selector = absl::StrCat(kAppLabel, "=", kAppName)},
      [r = runtime.get()](const std::string& key) { r->OnChange(key); });
  runtime->informer_->Start();
  if (!runtime->informer_->WaitForSync(runtime->options_.sync_timeout)) {
    const auto listed = client.List(runtime->Path("pods"));
    return absl::UnavailableError(absl::StrCat(
        "listing pods in namespace ", runtime->options_.namespace_name, " at ",
        client.config().server, ": ",
        listed.ok() ? "no answer within the sync timeout" : listed.status().ToString()));
  }
  return runtime;
}

KubernetesPodRuntime::KubernetesPodRuntime(kube::Client& client, PodTemplate pod_template,
                                           KubernetesPodRuntimeOptions options)
    : client_(client), template_(std::move(pod_template)), options_(std::move(options)) {}

KubernetesPodRuntime::~KubernetesPodRuntime() {
  if (informer_) informer_->Stop();
}

std::string KubernetesPodRuntime::Path(const std::string& plural, const std::string& name) const {
  return kube::ResourcePath(
      {.version = "v1", .namespace_name = options_.namespace_name, .plural = plural, .name = name});
}

absl::StatusOr<Owner> KubernetesPodRuntime::OwnerOf(const std::string& volume) {
  auto share = client_.Get(kube::ResourcePath({.group = kGroup,
                                               .version = kVersion,
                                               .namespace_name = options_.namespace_name,
                                               .plural = kResource,
                                               .name = volume}));
  if (!share.ok()) {
    return absl::Status(share.status().code(), absl::StrCat("the pod's owner, ", kKind, " ", volume,
                                                            ": ", share.status().message()));
  }
  return Owner{.name = volume, .uid = kube::StringAt(*share, {"metadata", "uid"})};
}

absl::Status KubernetesPodRuntime::EnsureService(const std::string& volume, const Owner& owner) {
  const auto made = client_.Create(Path("services"), template_.RenderService(volume, owner));
  if (made.ok() || made.status().code() == absl::StatusCode::kAlreadyExists) {
    return absl::OkStatus();
  }
  return absl::Status(made.status().code(),
                      absl::StrCat("the Service of ", volume, ": ", made.status().message()));
}

absl::StatusOr<Pod> KubernetesPodRuntime::Create(
    const sharemanager::controller::v1::ShareSpec& spec, uint64_t epoch) {
  if (auto s = CheckShareFlags(spec); !s.ok()) return s;
  auto owner = OwnerOf(spec.volume());
  if (!owner.ok()) return owner.status();
  if (auto s = EnsureService(spec.volume(), *owner); !s.ok()) return s;
  const json wanted = template_.RenderPod(spec, epoch, *owner);
  auto made = client_.Create(Path("pods"), wanted);
  if (!made.ok() && made.status().code() == absl::StatusCode::kAlreadyExists) {
    // A Create that took effect but whose answer was lost: the pod is ours
    // when it is this share's pod of this epoch (names are per epoch).
    made = client_.Get(Path("pods", PodName(spec.volume(), epoch)));
  }
  if (!made.ok()) return made.status();
  auto pod = PodFromObject(*made, template_);
  if (!pod.ok()) return pod.status();
  if (pod->volume != spec.volume() || pod->epoch != epoch) {
    return absl::AlreadyExistsError(absl::StrCat("pod ", pod->name, " exists and is not ",
                                                 spec.volume(), "'s of epoch ", epoch));
  }
  {
    absl::MutexLock lock(&mu_);
    created_[pod->name] = *made;
  }
  return pod;
}

std::optional<json> KubernetesPodRuntime::Latest(const std::string& name) {
  // The version first: the cache read after it is at least that new.
  const uint64_t seen = kube::VersionNumber(informer_->ResourceVersion());
  auto cached = informer_->Get(absl::StrCat(options_.namespace_name, "/", name));
  absl::MutexLock lock(&mu_);
  const auto it = created_.find(name);
  if (it == created_.end()) return cached;
  if (cached || seen >= kube::VersionNumber(it->second)) {
    created_.erase(it);
    return cached;
  }
  return it->second;
}

absl::Status KubernetesPodRuntime::Delete(const std::string& name) {
  const auto object = Latest(name);
  if (!object) return absl::OkStatus();  // gone already
  // The pod's own grace period (its spec's, which the template it was made
  // from gave it), not today's template's: a pod is stopped as it was made.
  const auto deleted =
      client_.Delete(Path("pods", name), {.uid = kube::StringAt(*object, {"metadata", "uid"})});
  if (deleted.ok() || deleted.status().code() == absl::StatusCode::kNotFound) {
    return absl::OkStatus();
  }
  return absl::Status(deleted.status().code(),
                      absl::StrCat("deleting pod ", name, ": ", deleted.status().message()));
}

absl::StatusOr<std::vector<Pod>> KubernetesPodRuntime::List(const std::string& volume) {
  std::map<std::string, bool> names;
  for (const json& object : informer_->List()) {
    if (kube::StringAt(object, {"metadata", "labels", kVolumeLabel}) == volume) {
      names[kube::MetadataString(object, "name")] = true;
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, object] : created_) {
      if (kube::StringAt(object, {"metadata", "labels", kVolumeLabel}) == volume)
        names[name] = true;
    }
  }
  std::vector<Pod> pods;
  for (const auto& [name, unused] : names) {
    const auto object = Latest(name);
    if (!object) continue;
    // A pod that carries the labels but is no share-manager pod (someone
    // else's) is not one of ours to act on.
    if (auto pod = PodFromObject(*object, template_); pod.ok()) pods.push_back(*std::move(pod));
  }
  return pods;
}

void KubernetesPodRuntime::Watch(Listener listener) { listeners_.Add(std::move(listener)); }

void KubernetesPodRuntime::OnChange(const std::string& key) {
  const std::string name = key.substr(key.find('/') + 1);
  const auto object = informer_->Get(key);
  std::string volume;
  {
    absl::MutexLock lock(&mu_);
    if (object) {
      volume = kube::StringAt(*object, {"metadata", "labels", kVolumeLabel});
      volume_of_[name] = volume;
    } else if (const auto it = volume_of_.find(name); it != volume_of_.end()) {
      // Gone: the object went with it, its volume was remembered.
      volume = it->second;
      volume_of_.erase(it);
    }
  }
  if (!volume.empty()) listeners_.Notify(volume);
}

absl::Status KubernetesPodRuntime::Health() const { return informer_->Health(); }

}  // namespace controller::kubernetes
