// The shipped pod manifest as the controller's template: each share's pod
// keeps all it says and gets the share's name, labels, owner, arguments,
// device and claim; a template rendering could not rely on is refused at
// start, naming the field.
#include "controller/runtime/kubernetes/pod_template.h"

#include <doctest/doctest.h>

#include <string>

#include "base/files.h"
#include "kube/yaml.h"
#include "tests/support/require_ok.h"

namespace controller::kubernetes {
namespace {

using nlohmann::json;
using testing_support::RequireOk;

json Shipped() {
  const std::string file = SHAREMGR_SOURCE_DIR "/container/k8s/share-manager-pod.yaml";
  return RequireOk(kube::YamlToJson(RequireOk(base::ReadFile(file)), file));
}

json& Container(json& pod) { return pod["spec"]["containers"][0]; }

TEST_CASE("pod template: its hash names its content, whoever parses it and however copied") {
  const auto shipped = RequireOk(PodTemplate::Parse(Shipped()));
  CHECK(shipped.hash().size() == 16);
  CHECK(RequireOk(PodTemplate::Parse(Shipped())).hash() == shipped.hash());
  // A pod made from it, copied back as a template (kubectl get -o yaml).
  sharemanager::controller::v1::ShareSpec spec;
  spec.set_volume("pvc-a");
  const json pod = shipped.RenderPod(spec, 3, {.name = "pvc-a", .uid = "uid-1"});
  json copied = Shipped();
  copied["metadata"]["labels"] = pod["metadata"]["labels"];
  copied["metadata"]["uid"] = "uid-9";
  CHECK(RequireOk(PodTemplate::Parse(copied)).hash() == shipped.hash());
  // A new image is a new template.
  json updated = Shipped();
  Container(updated)["image"] = "localhost/share-manager:next";
  CHECK(RequireOk(PodTemplate::Parse(updated)).hash() != shipped.hash());
}

TEST_CASE("pod template: the shipped pod becomes each share's pod of each epoch") {
  const auto parsed = RequireOk(PodTemplate::Parse(Shipped()));
  CHECK(parsed.grpc_port() == 9600);
  CHECK(parsed.nfs_port() == 2049);

  sharemanager::controller::v1::ShareSpec spec;
  spec.set_volume("pvc-a");
  spec.add_daemon_flags("--grace-period=5");
  json pod = parsed.RenderPod(spec, 7, {.name = "pvc-a", .uid = "uid-1"});
  CHECK(pod["metadata"]["name"] == "share-manager-pvc-a-e7");
  CHECK(pod["metadata"]["labels"] == json({{"app.kubernetes.io/name", "share-manager"},
                                           {"share-manager/volume", "pvc-a"},
                                           {"share-manager/epoch", "7"},
                                           {"share-manager/pod-template-hash", parsed.hash()}}));
  CHECK(pod["metadata"]["ownerReferences"] ==
        json::parse(R"([{"apiVersion": "share-manager.io/v1alpha1", "kind": "ShareManager",
          "name": "pvc-a", "uid": "uid-1", "controller": true}])"));
  CHECK(pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true");  // kept
  const json& args = Container(pod)["args"];
  CHECK(args[0] == "daemon");
  CHECK(std::count(args.begin(), args.end(), "--volume=pvc-a") == 1);
  CHECK(std::count(args.begin(), args.end(), "--epoch=7") == 1);
  CHECK(std::count(args.begin(), args.end(), "--pod-uid=$(POD_UID)") == 1);  // kept
  CHECK(args.back() == "--grace-period=5");  // the share's flags come last: they win
  CHECK(Container(pod)["volumeDevices"][0]["devicePath"] == "/dev/longhorn/pvc-a");
  CHECK(pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "pvc-a");
  json shipped = Shipped();
  CHECK(Container(pod)["livenessProbe"] == Container(shipped)["livenessProbe"]);  // kept
  CHECK(pod["spec"]["restartPolicy"] == "Never");

  const json service = parsed.RenderService("pvc-a", {.name = "pvc-a", .uid = "uid-1"});
  CHECK(service["metadata"]["name"] == "pvc-a");
  CHECK(service["spec"]["selector"] ==
        json({{"app.kubernetes.io/name", "share-manager"}, {"share-manager/volume", "pvc-a"}}));
  CHECK(service["spec"]["ports"][0]["port"] == 2049);
  CHECK(service["metadata"]["ownerReferences"][0]["uid"] == "uid-1");
}

TEST_CASE("pod template: a pod copied with kubectl get, or one without metadata, serves") {
  json copied = Shipped();
  copied["metadata"]["uid"] = "u-1";
  copied["metadata"]["resourceVersion"] = "12";
  copied["metadata"]["namespace"] = "elsewhere";
  copied["status"] = {{"phase", "Running"}};
  sharemanager::controller::v1::ShareSpec spec;
  spec.set_volume("pvc-a");
  const json pod = RequireOk(PodTemplate::Parse(copied)).RenderPod(spec, 1, {"pvc-a", "u"});
  CHECK_FALSE(pod["metadata"].contains("uid"));
  CHECK_FALSE(pod["metadata"].contains("resourceVersion"));
  CHECK_FALSE(pod["metadata"].contains("namespace"));
  CHECK_FALSE(pod.contains("status"));
  json bare = Shipped();
  bare.erase("metadata");
  const json from_bare = RequireOk(PodTemplate::Parse(bare)).RenderPod(spec, 2, {"pvc-a", "u"});
  CHECK(from_bare["metadata"]["name"] == "share-manager-pvc-a-e2");
  CHECK(from_bare["metadata"]["labels"]["share-manager/epoch"] == "2");
}

TEST_CASE("pod template: a share's flags may not say who the pod is, who calls it or mounts it") {
  sharemanager::controller::v1::ShareSpec spec;
  spec.set_volume("pvc-a");
  spec.add_daemon_flags("--grace-period=5");
  spec.add_daemon_flags("--debug");
  CHECK(CheckShareFlags(spec).ok());
  for (const char* flag : {"--epoch=0", "--volume=other", "--pod-uid=x", "--device=/dev/sda",
                           "--nfs-clients=0.0.0.0/0", "--tls-allowed-client=anyone", "--tls-dir",
                           "--listen=0.0.0.0:1"}) {
    CAPTURE(flag);
    auto bad = spec;
    bad.add_daemon_flags(flag);
    const auto refused = CheckShareFlags(bad);
    CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(refused.message()).find("spec.daemonFlags[2]") != std::string::npos);
  }
}

TEST_CASE("pod template: what rendering relies on is checked, the error naming the field") {
  auto refused = [](json manifest, const std::string& field) {
    const auto got = PodTemplate::Parse(std::move(manifest));
    CAPTURE(got.status());
    CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(got.status().message()).find(field) != std::string::npos);
  };
  auto with = [](const json::json_pointer& at, json value) {
    json manifest = Shipped();
    manifest[at] = std::move(value);
    return manifest;
  };
  auto without = [](const json::json_pointer& parent, const std::string& key) {
    json manifest = Shipped();
    manifest[parent].erase(key);
    return manifest;
  };
  refused(json::array(), "(document)");
  refused(with("/kind"_json_pointer, "Deployment"), "kind");
  refused(with("/spec/restartPolicy"_json_pointer, "Always"), "spec.restartPolicy");
  refused(with("/spec/containers/0/name"_json_pointer, "main"), "spec.containers");
  json no_epoch = Shipped();
  json& args = Container(no_epoch)["args"];
  for (auto it = args.begin(); it != args.end(); ++it) {
    if (it->get<std::string>().rfind("--epoch=", 0) == 0) {
      args.erase(it);
      break;
    }
  }
  refused(no_epoch, "spec.containers[share-manager].args");
  refused(with("/spec/containers/0/args/1"_json_pointer, 5), "spec.containers[share-manager].args");
  refused(without("/spec/containers/0"_json_pointer, "volumeDevices"),
          "spec.containers[share-manager].volumeDevices");
  refused(with("/spec/volumes/0/name"_json_pointer, "other"), "spec.volumes");
  refused(with("/spec/containers/0/ports/0/name"_json_pointer, "api"),
          "spec.containers[share-manager].ports");
  refused(with("/spec/containers/0/ports/2/containerPort"_json_pointer, 70000),
          "spec.containers[share-manager].ports[nfs].containerPort");
  refused(with("/spec/terminationGracePeriodSeconds"_json_pointer, "soon"),
          "spec.terminationGracePeriodSeconds");
  refused(with("/metadata"_json_pointer, "pod"), "metadata");
  refused(with("/metadata/labels"_json_pointer, json::array()), "metadata.labels");
  refused(with("/spec/volumes/0/persistentVolumeClaim"_json_pointer, "x"), "spec.volumes");
  json no_port_number = Shipped();
  Container(no_port_number)["ports"][0].erase("containerPort");
  refused(no_port_number, "spec.containers[share-manager].ports[grpc].containerPort");
}

}  // namespace
}  // namespace controller::kubernetes
