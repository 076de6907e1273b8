#include "kube/config.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/files.h"

namespace kube {
namespace {

// Reads `what` (a field naming a file) for the error of `where`.
absl::StatusOr<std::string> ReadNamedFile(const std::string& where, const std::string& path) {
  auto content = base::ReadFile(path);
  if (!content.ok()) {
    return absl::Status(content.status().code(),
                        absl::StrCat(where, ": ", content.status().message()));
  }
  return content;
}

// The entry of `list` (clusters, users, contexts) called `name`, its inner
// map (`cluster`, `user`, `context`).
absl::StatusOr<YAML::Node> Named(const YAML::Node& root, const std::string& file, const char* list,
                                 const char* inner, const std::string& name) {
  const YAML::Node entries = root[list];
  if (entries && entries.IsSequence()) {
    for (const auto& entry : entries) {
      if (entry["name"] && entry["name"].as<std::string>() == name) {
        const YAML::Node value = entry[inner];
        if (!value || !value.IsMap()) {
          return absl::InvalidArgumentError(
              absl::StrCat("kubeconfig ", file, ": ", list, "[", name, "] has no ", inner));
        }
        return value;
      }
    }
  }
  return absl::NotFoundError(
      absl::StrCat("kubeconfig ", file, ": no entry named \"", name, "\" in ", list));
}

std::string Scalar(const YAML::Node& map, const char* key) {
  const YAML::Node value = map[key];
  return value && value.IsScalar() ? value.as<std::string>() : std::string();
}

// `key`-data (base64) or `key` (a file, relative to the kubeconfig's folder):
// "" when neither is there.
absl::StatusOr<std::string> DataOrFile(const YAML::Node& map, const std::string& where,
                                       const std::filesystem::path& dir, const std::string& key) {
  const std::string data_key = key + "-data";
  const std::string data = Scalar(map, data_key.c_str());
  if (!data.empty()) {
    std::string decoded;
    if (!absl::Base64Unescape(absl::StripAsciiWhitespace(data), &decoded)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".", data_key, " is not valid base64"));
    }
    return decoded;
  }
  const std::string file = Scalar(map, key.c_str());
  if (file.empty()) return std::string();
  return ReadNamedFile(absl::StrCat(where, ".", key), (dir / file).lexically_normal().string());
}

absl::StatusOr<ClientConfig> FromKubeconfig(const YAML::Node& root, const std::string& path,
                                            const std::string& wanted_context) {
  const std::string context_name =
      wanted_context.empty() ? Scalar(root, "current-context") : wanted_context;
  if (context_name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kubeconfig ", path, ": current-context is not set and no context was asked for"));
  }
  auto context = Named(root, path, "contexts", "context", context_name);
  if (!context.ok()) return context.status();
  const std::string cluster_name = Scalar(*context, "cluster");
  const std::string user_name = Scalar(*context, "user");
  if (cluster_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubeconfig ", path, ": contexts[", context_name, "] names no cluster"));
  }
  auto cluster = Named(root, path, "clusters", "cluster", cluster_name);
  if (!cluster.ok()) return cluster.status();

  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  ClientConfig config;
  config.source = absl::StrCat("kubeconfig ", path, " (context ", context_name, ")");
  const std::string cluster_where =
      absl::StrCat("kubeconfig ", path, ": clusters[", cluster_name, "]");
  config.server = std::string(absl::StripSuffix(Scalar(*cluster, "server"), "/"));
  if (config.server.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(cluster_where, ".server is not set"));
  }
  auto ca = DataOrFile(*cluster, cluster_where, dir, "certificate-authority");
  if (!ca.ok()) return ca.status();
  config.ca_pem = *std::move(ca);
  const std::string ns = Scalar(*context, "namespace");
  if (!ns.empty()) config.default_namespace = ns;

  if (user_name.empty()) return config;  // anonymous
  auto user = Named(root, path, "users", "user", user_name);
  if (!user.ok()) return user.status();
  const std::string user_where = absl::StrCat("kubeconfig ", path, ": users[", user_name, "]");
  // Credentials got by running a program or from a cloud's provider: not
  // ours to run; say so instead of calling anonymously.
  for (const char* unsupported : {"exec", "auth-provider"}) {
    if ((*user)[unsupported]) {
      return absl::UnimplementedError(
          absl::StrCat(user_where, ".", unsupported, " credentials are not supported"));
    }
  }
  auto cert = DataOrFile(*user, user_where, dir, "client-certificate");
  if (!cert.ok()) return cert.status();
  auto key = DataOrFile(*user, user_where, dir, "client-key");
  if (!key.ok()) return key.status();
  if (cert->empty() != key->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(user_where, ": ",
                                                   cert->empty()
                                                       ? "client-key without client-certificate"
                                                       : "client-certificate without client-key"));
  }
  config.client_cert_pem = *std::move(cert);
  config.client_key_pem = *std::move(key);
  config.token = Scalar(*user, "token");
  const std::string token_file = Scalar(*user, "tokenFile");
  if (!token_file.empty()) {
    config.token_file = (dir / token_file).lexically_normal().string();
    // Read once now: a missing file is a setup error better told at start.
    auto token = ReadNamedFile(user_where + ".tokenFile", config.token_file);
    if (!token.ok()) return token.status();
  }
  return config;
}

}  // namespace

absl::StatusOr<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  auto text = ReadNamedFile("kubeconfig", path);
  if (!text.ok()) return text.status();
  YAML::Node root;
  try {
    root = YAML::Load(*text);
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, " is not a YAML map"));
    }
    return FromKubeconfig(root, path, context);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": ", e.what()));
  }
}

absl::StatusOr<ClientConfig> InClusterConfig(const std::string& service_account_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return absl::FailedPreconditionError(
        "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not both set "
        "(not running in a pod?)");
  }
  const std::string host_part = absl::StrContains(host, ':') ? absl::StrCat("[", host, "]") : host;
  ClientConfig config;
  config.source = "in-cluster";
  config.server = absl::StrCat("https://", host_part, ":", port);
  config.token_file = service_account_dir + "/token";
  auto token = ReadNamedFile("in-cluster config: token", config.token_file);
  if (!token.ok()) return token.status();
  auto ca = ReadNamedFile("in-cluster config: ca.crt", service_account_dir + "/ca.crt");
  if (!ca.ok()) return ca.status();
  config.ca_pem = *std::move(ca);
  auto ns = base::ReadFile(service_account_dir + "/namespace");
  if (ns.ok()) {
    const std::string name(absl::StripAsciiWhitespace(*ns));
    if (!name.empty()) config.default_namespace = name;
  } else if (!absl::IsNotFound(ns.status())) {
    return absl::Status(ns.status().code(),
                        absl::StrCat("in-cluster config: namespace: ", ns.status().message()));
  }
  return config;
}

absl::StatusOr<ClientConfig> ConfigFromEnvironment(const std::string& kubeconfig_flag) {
  if (!kubeconfig_flag.empty()) return LoadKubeconfig(kubeconfig_flag);
  const char* env = std::getenv("KUBECONFIG");
  if (env != nullptr && *env != '\0') {
    // kubectl merges a list of files; one is all this client reads.
    if (absl::StrContains(env, ':')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "KUBECONFIG=", env, " lists several files; name the one to use with --kubeconfig"));
    }
    auto config = LoadKubeconfig(env);
    if (config.ok()) config->source = absl::StrCat("$KUBECONFIG: ", config->source);
    return config;
  }
  return InClusterConfig();
}

}  // namespace kube
