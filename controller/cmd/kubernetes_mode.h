// share-controller --kubernetes: shares are ShareManager objects of one
// namespace and pods are made through the API from a pod template, instead
// of flags, a store file or etcd, and local processes.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "controller/ha/ha_replica.h"
#include "controller/ha/kubernetes/lease_leadership.h"
#include "controller/runtime/kubernetes/kubernetes_pod_runtime.h"
#include "controller/runtime/kubernetes/pod_template.h"
#include "controller/store/kubernetes/kubernetes_store.h"
#include "controller/store/kubernetes/share_events.h"
#include "kube/client.h"

namespace controller::kubernetes {

struct KubernetesFlags {
  bool enabled = false;
  std::string kubeconfig;
  std::string namespace_name;
  std::string pod_template;
  std::string leader_lease = kDefaultLeaderLease;
};

void AddKubernetesFlags(CLI::App& app, KubernetesFlags& flags);

// The flags of the one-machine modes (shares, store, work dir, local pods)
// that make no sense with --kubernetes, and --kubernetes' own without it:
// InvalidArgument naming them.
absl::Status CheckKubernetesFlags(const CLI::App& app, const KubernetesFlags& flags);

// The pod template file, read and checked: InvalidArgument naming the file
// and the field.
absl::StatusOr<PodTemplate> LoadPodTemplate(const std::string& path);

// What --kubernetes runs on, in the order it must be torn down (the store
// and runtime stop their informers before the client goes, the client before
// the leadership whose write gate it asks).
struct KubernetesBackends {
  std::unique_ptr<LeaseLeadership> leadership;
  std::unique_ptr<kube::Client> client;
  std::string namespace_name;
  std::unique_ptr<KubernetesStore> store;
  std::unique_ptr<KubernetesPodRuntime> runtime;
  std::unique_ptr<ShareEvents> events;
  ~KubernetesBackends();
  // OK while both informers (shares, pods) are synced and watching and the
  // election reads its Lease; else which one is not, and why (the
  // controller's readiness, leader or follower).
  absl::Status Ready() const;
  // No Event is posted from here on (before Resign: its writes would be refused).
  void StopEvents();
  // Every recorded phase or reason change of a share as an Event on it.
  void RecordTransition(const std::string& share,
                        const sharemanager::controller::v1::ShareStatusRecord& status);
};

// Connects (the kubeconfig, $KUBECONFIG, or the pod's service account),
// opens the store and the runtime, and once both are synced campaigns on the
// Lease as `leader`: UNAVAILABLE (or the apiserver's refusal) naming the
// server and the namespace when it cannot list. Every write goes through the
// leadership's write gate.
absl::StatusOr<std::unique_ptr<KubernetesBackends>> OpenKubernetes(const KubernetesFlags& flags,
                                                                   PodTemplate pod_template,
                                                                   LeaderFlags leader);

}  // namespace controller::kubernetes
