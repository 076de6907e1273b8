// KubernetesStore on a real kube-apiserver (label k8s): the contract every
// Store keeps, and what only this one does (a finalizer holds a deleted
// share; the status is a subresource; another writer is heard).
#include "controller/store/kubernetes/kubernetes_store.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "base/files.h"
#include "controller/store/kubernetes/share_object.h"
#include "kube/paths.h"
#include "kube/yaml.h"
#include "tests/controller/store/store_contract.h"
#include "tests/kube/test_cluster.h"
#include "tests/support/require_ok.h"
#include "tests/support/wait_for.h"

namespace controller::kubernetes {
namespace {

using nlohmann::json;
using testing_support::RequireOk;

// The shipped CRD, installed once per test process and established.
void InstallCrd(kube::Client& client) {
  static bool installed = false;
  if (installed) return;
  const std::string file = SHAREMGR_SOURCE_DIR "/deploy/base/crd.yaml";
  const json crd = RequireOk(kube::YamlToJson(RequireOk(base::ReadFile(file)), file));
  const std::string crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
  const auto created = client.Create(crds, crd);
  if (!created.ok()) REQUIRE(created.status().code() == absl::StatusCode::kAlreadyExists);
  const std::string name = crd["metadata"]["name"];
  REQUIRE(testing_support::WaitFor(
      [&] {
        const auto got = client.Get(crds + "/" + name);
        if (!got.ok()) return false;
        for (const auto& c :
             got->value("status", json::object()).value("conditions", json::array())) {
          if (c.value("type", "") == "Established" && c.value("status", "") == "True") return true;
        }
        return false;
      },
      std::chrono::seconds(30)));
  installed = true;
}

struct StoreOnCluster {
  StoreOnCluster()
      : client(RequireOk(kube::Client::Create(kube::testing::AdminConfig()))),
        ns((InstallCrd(*client), *client), "store-test") {
    kube_store = RequireOk(KubernetesStore::Open(*client, {.namespace_name = ns.name()}));
  }
  Store& store() { return *kube_store; }
  std::string Path(const std::string& name, const std::string& sub = "") const {
    return kube::ResourcePath({.group = kGroup,
                               .version = kVersion,
                               .namespace_name = ns.name(),
                               .plural = kResource,
                               .name = name,
                               .subresource = sub});
  }

  std::unique_ptr<kube::Client> client;
  kube::testing::TestNamespace ns;
  // Last: stopped (its informer joined) before the namespace goes.
  std::unique_ptr<KubernetesStore> kube_store;
};

}  // namespace
}  // namespace controller::kubernetes

STORE_CONTRACT_TESTS(controller::kubernetes::StoreOnCluster, "KubernetesStore");

namespace controller::kubernetes {
namespace {

TEST_CASE("KubernetesStore: a deleted share that holds a pod stays until it lets go") {
  StoreOnCluster f;
  auto r = RequireOk(f.store().Create(ServedShare("pvc-a")));
  r.mutable_status()->set_hold_record(true);  // as the reconciler sets it before a pod
  r = RequireOk(f.store().Update(r));
  const auto object = RequireOk(f.client->Get(f.Path("pvc-a")));
  CHECK(object["metadata"]["finalizers"] == json::array({kFinalizer}));

  REQUIRE(f.store().Delete("pvc-a").ok());
  r = RequireOk(f.store().Get("pvc-a"));
  CHECK(r.deletion_requested());
  CHECK(r.status().hold_record());
  CHECK(RequireOk(f.client->Get(f.Path("pvc-a")))["metadata"].contains("deletionTimestamp"));

  r.mutable_status()->set_phase(sharemanager::controller::v1::STOPPED);
  r.mutable_status()->set_hold_record(false);
  const auto released = RequireOk(f.store().Update(r));
  CAPTURE(released.ShortDebugString());
  // Read at once: this store's own release, not the informer's view.
  const auto after = f.store().Get("pvc-a");
  const std::string after_text = after.ok() ? after->ShortDebugString() : after.status().ToString();
  CAPTURE(after_text);
  CHECK(after.status().code() == absl::StatusCode::kNotFound);
  CHECK(testing_support::WaitFor(
      [&] { return f.client->Get(f.Path("pvc-a")).status().code() == absl::StatusCode::kNotFound; },
      std::chrono::seconds(30)));
}

TEST_CASE("KubernetesStore: a change by another writer is heard and read") {
  StoreOnCluster f;
  store_contract::Heard heard;
  f.store().Watch(heard.Listener());
  RequireOk(f.store().Create(ServedShare("pvc-b")));
  REQUIRE(heard.Await(1) == std::vector<std::string>{"pvc-b"});
  // kubectl edit, as an operator would: serve no more.
  RequireOk(f.client->MergePatch(f.Path("pvc-b"), {{"spec", {{"serve", false}}}}));
  REQUIRE(heard.Await(2).size() >= 2);
  const auto r = RequireOk(f.store().Get("pvc-b"));
  CHECK_FALSE(r.spec().serve());
  CHECK(r.spec_generation() == 2);
  // A status sent to the object itself is not the status.
  RequireOk(f.client->MergePatch(f.Path("pvc-b"), {{"status", {{"phase", "RUNNING"}}}}));
  CHECK(RequireOk(f.store().Get("pvc-b")).status().phase() ==
        sharemanager::controller::v1::PHASE_UNSPECIFIED);
}

TEST_CASE("KubernetesStore: Open against an apiserver that refuses the token says so") {
  auto config = kube::testing::AdminConfig();
  config.client_cert_pem.clear();
  config.client_key_pem.clear();
  config.token = "not-a-token";
  auto client = RequireOk(kube::Client::Create(config));
  const auto opened = KubernetesStore::Open(
      *client, {.namespace_name = "default", .sync_timeout = absl::Seconds(2)});
  CHECK(opened.status().code() == absl::StatusCode::kUnavailable);
  CAPTURE(opened.status());
  CHECK(std::string(opened.status().message()).find("sharemanagers") != std::string::npos);
}

}  // namespace
}  // namespace controller::kubernetes
