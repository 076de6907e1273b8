// A PodRuntime whose pods are Kubernetes pods in one namespace, made from the
// pod template (pod_template.h) for each share and epoch.
//
// - Pods are observed through an informer (list + watch of the namespace's
//   share-manager pods), never remembered: phase, the container's exit code
//   and termination message, its IP (the gRPC endpoint), its UID (what the
//   pod's share-manager reports as --pod-uid, so whoever answers on that IP
//   must be that pod), and whether its deletion has begun.
// - A pod this runtime created is listed at once, before the informer has
//   seen it, so the reconciler never takes a pod it just made for missing.
// - Create makes the share's Service first (once), then the pod; both are
//   owned by the ShareManager, so the garbage collector takes what a
//   controller crash left behind once the share object goes.
// - Delete is conditional on the pod's UID, with the template's grace period:
//   a pod of the same name made since is never deleted by mistake.
// - Listeners hear the volume of every pod that changes.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "controller/core/listeners.h"
#include "controller/runtime/kubernetes/pod_template.h"
#include "controller/runtime/pod_runtime.h"
#include "kube/client.h"
#include "kube/informer.h"

namespace controller::kubernetes {

struct KubernetesPodRuntimeOptions {
  std::string namespace_name;
  // Open waits this long for the first list of pods.
  absl::Duration sync_timeout = absl::Seconds(30);
};

// The pod an object of the API is (its share-manager container's view).
// InvalidArgument when it is no share-manager pod (labels missing).
absl::StatusOr<Pod> PodFromObject(const nlohmann::json& object, const PodTemplate& pod_template);

class KubernetesPodRuntime final : public PodRuntime {
 public:
  // `client` must outlive the runtime.
  static absl::StatusOr<std::unique_ptr<KubernetesPodRuntime>> Open(
      kube::Client& client, PodTemplate pod_template, KubernetesPodRuntimeOptions options);
  // Stops the informer: no listener is called after.
  ~KubernetesPodRuntime() override;

  absl::StatusOr<Pod> Create(const sharemanager::controller::v1::ShareSpec& spec,
                             uint64_t epoch) override;
  absl::Status Delete(const std::string& pod) override;
  absl::StatusOr<std::vector<Pod>> List(const std::string& volume) override;
  void Watch(Listener listener) override;
  // Whether the pods it sees are current: kube::Informer::Health.
  absl::Status Health() const;

 private:
  KubernetesPodRuntime(kube::Client& client, PodTemplate pod_template,
                       KubernetesPodRuntimeOptions options);
  std::string Path(const std::string& plural, const std::string& name = "") const;
  absl::StatusOr<Owner> OwnerOf(const std::string& volume);
  absl::Status EnsureService(const std::string& volume, const Owner& owner);
  // The newest object known for the pod: the informer's, or the one Create
  // got back while the informer has not seen it yet.
  std::optional<nlohmann::json> Latest(const std::string& name);
  void OnChange(const std::string& key);

  kube::Client& client_;
  const PodTemplate template_;
  const KubernetesPodRuntimeOptions options_;
  Listeners listeners_;
  absl::Mutex mu_;
  // Created by this runtime, not yet seen by the informer (by pod name).
  std::map<std::string, nlohmann::json> created_ ABSL_GUARDED_BY(mu_);
  // Every pod the informer holds, by name: the volume to report when it goes.
  std::map<std::string, std::string> volume_of_ ABSL_GUARDED_BY(mu_);
  // Last: it calls OnChange until it is stopped, first, in the destructor.
  std::unique_ptr<kube::Informer> informer_;
};

}  // namespace controller::kubernetes
