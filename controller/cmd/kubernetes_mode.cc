#include "controller/cmd/kubernetes_mode.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "base/validate.h"
#include "kube/config.h"
#include "kube/yaml.h"

namespace controller::kubernetes {

void AddKubernetesFlags(CLI::App& app, KubernetesFlags& flags) {
  app.add_flag("--kubernetes", flags.enabled,
               "Run on Kubernetes: shares are ShareManager objects (deploy/base/crd.yaml) in "
               "--namespace, pods are made through the API from --pod-template; instead of "
               "--share, the store flags and local processes");
  app.add_option("--kubeconfig", flags.kubeconfig,
                 "With --kubernetes: the kubeconfig to use (default: $KUBECONFIG, else the pod's "
                 "service account)");
  app.add_option("--namespace", flags.namespace_name,
                 "With --kubernetes: the namespace of the shares and their pods (default: the "
                 "kubeconfig context's, or the pod's own)");
  app.add_option("--pod-template", flags.pod_template,
                 "With --kubernetes: the share-manager pod manifest each share's pod is made "
                 "from (deploy/base/share-manager-pod.yaml, or your own)");
  app.add_option("--leader-lease", flags.leader_lease,
                 "With --kubernetes: the Lease (coordination.k8s.io/v1, in --namespace) the "
                 "replicas elect their one leader on; only the leader writes. RBAC must let the "
                 "replicas update it (deploy/base/rbac.yaml names the default)")
      ->capture_default_str();
}

absl::Status CheckKubernetesFlags(const CLI::App& app, const KubernetesFlags& flags) {
  if (!flags.enabled) {
    for (const char* own : {"--kubeconfig", "--namespace", "--pod-template", "--leader-lease"}) {
      if (app.count(own) > 0)
        return absl::InvalidArgumentError(absl::StrCat(own, " needs --kubernetes"));
    }
    return absl::OkStatus();
  }
  std::vector<std::string> local;
  for (const char* flag : {"--share", "--shares-file", "--store-file", "--store", "--work-dir",
                           "--share-manager-binary", "--daemon-flag", "--ephemeral-pods",
                           "--stop-pods-on-exit", "--termination-grace", "--port-range"}) {
    if (app.count(flag) > 0) local.push_back(flag);
  }
  if (!local.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kubernetes keeps shares as ShareManager objects and makes pods from --pod-template: ",
        absl::StrJoin(local, ", "), local.size() == 1 ? " does" : " do",
        " not apply (a pod's flags go in the template's args or a share's spec.daemonFlags)"));
  }
  if (flags.pod_template.empty()) {
    return absl::InvalidArgumentError("--kubernetes needs --pod-template");
  }
  return base::ValidateLabelName("--leader-lease", "Lease name", flags.leader_lease);
}

absl::StatusOr<PodTemplate> LoadPodTemplate(const std::string& path) {
  auto text = base::ReadFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pod-template ", path, ": ", text.status().message()));
  }
  auto manifest = kube::YamlToJson(*text, path);
  if (!manifest.ok()) return manifest.status();
  auto parsed = PodTemplate::Parse(*std::move(manifest));
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pod-template ", path, ": ", parsed.status().message()));
  }
  return parsed;
}

KubernetesBackends::~KubernetesBackends() {
  events.reset();
  runtime.reset();
  store.reset();
  client.reset();
}

void KubernetesBackends::StopEvents() { events.reset(); }

absl::Status KubernetesBackends::Ready() const {
  if (auto s = leadership->Health(); !s.ok()) return absl::UnavailableError(s.message());
  if (auto s = store->Health(); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("ShareManagers: ", s.message()));
  }
  if (auto s = runtime->Health(); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("pods: ", s.message()));
  }
  return absl::OkStatus();
}

void KubernetesBackends::RecordTransition(
    const std::string& share, const sharemanager::controller::v1::ShareStatusRecord& status) {
  if (!events) return;
  ShareEvent event = EventFor(share, status, absl::ToUnixMillis(absl::Now()));
  event.uid = store->Uid(share);
  events->Record(std::move(event));
}

absl::StatusOr<std::unique_ptr<KubernetesBackends>> OpenKubernetes(const KubernetesFlags& flags,
                                                                   PodTemplate pod_template,
                                                                   LeaderFlags leader) {
  auto config = kube::ConfigFromEnvironment(flags.kubeconfig);
  if (!config.ok()) return config.status();
  auto backends = std::make_unique<KubernetesBackends>();
  backends->namespace_name =
      flags.namespace_name.empty() ? config->default_namespace : flags.namespace_name;
  const std::string source = config->source;
  const std::string user_agent = absl::StrCat("share-controller/", leader.id);
  auto leadership = LeaseLeadership::Create({.config = *config,
                                             .namespace_name = backends->namespace_name,
                                             .lease_name = flags.leader_lease,
                                             .leader = std::move(leader)});
  if (!leadership.ok()) return leadership.status();
  backends->leadership = *std::move(leadership);
  auto client = kube::Client::Create(
      *std::move(config),
      {.write_gate = backends->leadership->WriteGate(), .user_agent = user_agent});
  if (!client.ok()) return client.status();
  backends->client = *std::move(client);
  spdlog::info("Kubernetes API at {} ({}), namespace {}", backends->client->config().server, source,
               backends->namespace_name);
  auto store =
      KubernetesStore::Open(*backends->client, {.namespace_name = backends->namespace_name});
  if (!store.ok()) return store.status();
  backends->store = *std::move(store);
  auto runtime = KubernetesPodRuntime::Open(*backends->client, std::move(pod_template),
                                            {.namespace_name = backends->namespace_name});
  if (!runtime.ok()) return runtime.status();
  backends->runtime = *std::move(runtime);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  backends->events =
      std::make_unique<ShareEvents>(*backends->client, backends->namespace_name, host);
  // After the informers synced: a replica elected acts at once on what they hold.
  backends->leadership->Campaign();
  return backends;
}

}  // namespace controller::kubernetes
