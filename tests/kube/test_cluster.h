// What the tests on the real test cluster (tests/k8s/cluster.sh, label k8s)
// share: its admin kubeconfig, and a namespace of the test's own.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/files.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/paths.h"
#include "tests/support/require_ok.h"

namespace kube::testing {

// The cluster's admin kubeconfig, from the env file the fixture wrote. No
// cluster is a failure: these tests run only where the fixture brought one up.
inline ClientConfig AdminConfig() {
  const char* dir = std::getenv("SHAREMGR_K8S_DIR");
  REQUIRE_MESSAGE(dir != nullptr, "SHAREMGR_K8S_DIR is not set: no test cluster to run on");
  const std::string env_file = absl::StrCat(dir, "/env");
  auto env = base::ReadFile(env_file);
  REQUIRE_MESSAGE(env.ok(), "no test cluster is up: ", env.status().ToString());
  std::string kubeconfig;
  for (absl::string_view line : absl::StrSplit(*env, '\n')) {
    if (absl::ConsumePrefix(&line, "export KUBECONFIG=")) kubeconfig = std::string(line);
  }
  REQUIRE_MESSAGE(!kubeconfig.empty(), env_file, " names no KUBECONFIG");
  return testing_support::RequireOk(LoadKubeconfig(kubeconfig));
}

// A namespace for one test case, deleted (with all in it) when it goes.
class TestNamespace {
 public:
  TestNamespace(Client& client, const std::string& prefix) : client_(client) {
    static int count = 0;
    name_ = absl::StrCat(prefix, "-", getpid(), "-", ++count);
    testing_support::RequireOk(
        client_.Create(ResourcePath({.version = "v1", .plural = "namespaces"}),
                       {{"metadata", {{"name", name_}}}}));
  }
  ~TestNamespace() {
    const auto deleted =
        client_.Delete(ResourcePath({.version = "v1", .plural = "namespaces", .name = name_}));
    if (!deleted.ok())
      FAIL_CHECK("namespace " << name_ << " left: " << deleted.status().ToString());
  }
  TestNamespace(const TestNamespace&) = delete;
  TestNamespace& operator=(const TestNamespace&) = delete;
  const std::string& name() const { return name_; }

 private:
  Client& client_;
  std::string name_;
};

}  // namespace kube::testing
