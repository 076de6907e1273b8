// Kubeconfig files and the in-cluster service account, read into a ClientConfig.
#include "kube/config.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"

namespace kube {
namespace {

using testing_support::RequireOk;

void Write(const std::string& path, const std::string& content) {
  REQUIRE(base::WriteFileAtomically(path, content).ok());
}

// Two clusters and users: "inline" with every certificate in the file,
// "files" naming files beside it (relative) and a token file.
std::string TwoContexts(const std::string& current) {
  return absl::StrCat(R"(apiVersion: v1
kind: Config
clusters:
  - name: inline
    cluster:
      server: https://10.0.0.1:6443/
      certificate-authority-data: )",
                      absl::Base64Escape("CA PEM"), R"(
  - name: files
    cluster:
      server: https://[fd00::1]:443
      certificate-authority: pki/ca.crt
users:
  - name: inline
    user:
      client-certificate-data: )",
                      absl::Base64Escape("CERT PEM"), R"(
      client-key-data: )",
                      absl::Base64Escape("KEY PEM"), R"(
  - name: files
    user:
      tokenFile: token
contexts:
  - name: inline
    context: {cluster: inline, user: inline}
  - name: files
    context: {cluster: files, user: files, namespace: shares}
)",
                      current.empty() ? "" : absl::StrCat("current-context: ", current, "\n"));
}

TEST_CASE("kubeconfig: inline data of the current context") {
  testing_support::TempDir dir;
  const std::string path = dir.path() + "/config";
  Write(path, TwoContexts("inline"));
  const ClientConfig config = RequireOk(LoadKubeconfig(path));
  CHECK(config.server == "https://10.0.0.1:6443");
  CHECK(config.ca_pem == "CA PEM");
  CHECK(config.client_cert_pem == "CERT PEM");
  CHECK(config.client_key_pem == "KEY PEM");
  CHECK(config.token_file.empty());
  CHECK(config.default_namespace == "default");
  CHECK(config.source == absl::StrCat("kubeconfig ", path, " (context inline)"));
}

TEST_CASE("kubeconfig: another context, its files relative to the kubeconfig's folder") {
  testing_support::TempDir dir;
  REQUIRE(base::EnsureDirectory(dir.path() + "/pki", 0700).ok());
  Write(dir.path() + "/pki/ca.crt", "CA FROM FILE");
  Write(dir.path() + "/token", "secret-token\n");
  const std::string path = dir.path() + "/config";
  Write(path, TwoContexts("inline"));
  const ClientConfig config = RequireOk(LoadKubeconfig(path, "files"));
  CHECK(config.server == "https://[fd00::1]:443");
  CHECK(config.ca_pem == "CA FROM FILE");
  CHECK(config.token_file == dir.path() + "/token");
  CHECK(config.client_cert_pem.empty());
  CHECK(config.default_namespace == "shares");
}

TEST_CASE("kubeconfig: what is missing or wrong is named") {
  testing_support::TempDir dir;
  const std::string path = dir.path() + "/config";

  Write(path, TwoContexts(""));
  auto no_current = LoadKubeconfig(path);
  CHECK(absl::IsInvalidArgument(no_current.status()));
  CHECK(no_current.status().message().find("current-context is not set") != std::string::npos);

  auto unknown = LoadKubeconfig(path, "elsewhere");
  CHECK(absl::IsNotFound(unknown.status()));
  CHECK(unknown.status().message().find("no entry named \"elsewhere\" in contexts") !=
        std::string::npos);

  // The relative files are missing here.
  auto missing_file = LoadKubeconfig(path, "files");
  CHECK(absl::IsNotFound(missing_file.status()));
  CHECK(missing_file.status().message().find("clusters[files].certificate-authority") !=
        std::string::npos);

  std::string bad = TwoContexts("inline");
  const std::string key = absl::Base64Escape("KEY PEM");
  bad.replace(bad.find(key), key.size(), "not*base64");
  Write(path, bad);
  auto bad_base64 = LoadKubeconfig(path);
  CHECK(absl::IsInvalidArgument(bad_base64.status()));
  CHECK(bad_base64.status().message().find("users[inline].client-key-data is not valid base64") !=
        std::string::npos);

  Write(path, "clusters: [unclosed");
  CHECK(absl::IsInvalidArgument(LoadKubeconfig(path).status()));
  CHECK(absl::IsNotFound(LoadKubeconfig(dir.path() + "/absent").status()));
}

TEST_CASE("in-cluster config: the service account's files and the service's address") {
  testing_support::TempDir dir;
  Write(dir.path() + "/token", "pod-token");
  Write(dir.path() + "/ca.crt", "CLUSTER CA");
  Write(dir.path() + "/namespace", "storage\n");
  REQUIRE(setenv("KUBERNETES_SERVICE_HOST", "fd00:10::1", 1) == 0);
  REQUIRE(setenv("KUBERNETES_SERVICE_PORT", "443", 1) == 0);
  const ClientConfig config = RequireOk(InClusterConfig(dir.path()));
  CHECK(config.server == "https://[fd00:10::1]:443");
  CHECK(config.ca_pem == "CLUSTER CA");
  CHECK(config.token_file == dir.path() + "/token");
  CHECK(config.default_namespace == "storage");
  CHECK(config.source == "in-cluster");

  REQUIRE(setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1) == 0);
  CHECK(RequireOk(InClusterConfig(dir.path())).server == "https://10.96.0.1:443");

  REQUIRE(unlink((dir.path() + "/ca.crt").c_str()) == 0);
  auto no_ca = InClusterConfig(dir.path());
  CHECK(absl::IsNotFound(no_ca.status()));
  CHECK(no_ca.status().message().find("ca.crt") != std::string::npos);

  REQUIRE(unsetenv("KUBERNETES_SERVICE_HOST") == 0);
  CHECK(absl::IsFailedPrecondition(InClusterConfig(dir.path()).status()));
  REQUIRE(unsetenv("KUBERNETES_SERVICE_PORT") == 0);
}

TEST_CASE("the environment's config: the flag, else $KUBECONFIG, saying which") {
  testing_support::TempDir dir;
  const std::string path = dir.path() + "/config";
  Write(path, TwoContexts("inline"));
  REQUIRE(setenv("KUBECONFIG", path.c_str(), 1) == 0);
  CHECK(RequireOk(ConfigFromEnvironment("")).source.starts_with("$KUBECONFIG: kubeconfig "));
  CHECK(RequireOk(ConfigFromEnvironment(path)).source.starts_with("kubeconfig "));
  REQUIRE(setenv("KUBECONFIG", (path + ":" + path).c_str(), 1) == 0);
  CHECK(absl::IsInvalidArgument(ConfigFromEnvironment("").status()));
  REQUIRE(unsetenv("KUBECONFIG") == 0);
}

}  // namespace
}  // namespace kube
