// Where the apiserver is and who we are to it: from a kubeconfig file (a
// developer's, a test cluster's) or, inside a pod, from the service account
// Kubernetes mounts into it.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kube {

struct ClientConfig {
  std::string server;  // "https://HOST:PORT", no trailing slash
  // PEM of the CAs the apiserver's certificate must chain to; empty: the
  // system's.
  std::string ca_pem;
  // A client certificate and its key (PEM), both or neither.
  std::string client_cert_pem;
  std::string client_key_pem;
  // A bearer token: `token_file` is read again for every request (a pod's
  // projected token is rotated in place); `token` is used as it is.
  std::string token_file;
  std::string token;
  // The namespace the source names ("default" when it names none).
  std::string default_namespace = "default";
  // What it came from, for the log: "kubeconfig /x (context c)" or "in-cluster".
  std::string source;
};

// The kubeconfig at `path`, for `context` (its current-context when empty).
// Certificate and key data inline (*-data, base64) or in files, relative
// paths against the kubeconfig's own folder; a bearer token inline or in a
// tokenFile. Errors name the file and the field that is missing or wrong.
absl::StatusOr<ClientConfig> LoadKubeconfig(const std::string& path,
                                            const std::string& context = "");

inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

// The pod's own service account: the apiserver at $KUBERNETES_SERVICE_HOST
// and $KUBERNETES_SERVICE_PORT, the token, CA and namespace under
// `service_account_dir` (another folder only in tests).
absl::StatusOr<ClientConfig> InClusterConfig(
    const std::string& service_account_dir = kServiceAccountDir);

// `kubeconfig_flag` when given, else $KUBECONFIG (one file), else the
// in-cluster service account; `source` says which.
absl::StatusOr<ClientConfig> ConfigFromEnvironment(const std::string& kubeconfig_flag);

}  // namespace kube
