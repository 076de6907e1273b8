// A pod of the API as the reconciler sees it: phase, endpoint, UID, start,
// exit code and the termination message, and whether it is going.
#include "controller/runtime/kubernetes/kubernetes_pod_runtime.h"

#include <doctest/doctest.h>

#include "base/files.h"
#include "kube/yaml.h"
#include "tests/support/require_ok.h"

namespace controller::kubernetes {
namespace {

using nlohmann::json;
using testing_support::RequireOk;

PodTemplate Shipped() {
  const std::string file = SHAREMGR_SOURCE_DIR "/container/k8s/share-manager-pod.yaml";
  return RequireOk(
      PodTemplate::Parse(RequireOk(kube::YamlToJson(RequireOk(base::ReadFile(file)), file))));
}

json PodObject(const std::string& status) {
  return {{"metadata",
           {{"name", "share-manager-pvc-a-e2"},
            {"uid", "u-2"},
            {"labels", {{"share-manager/volume", "pvc-a"}, {"share-manager/epoch", "2"}}}}},
          {"status", json::parse(status)}};
}

TEST_CASE("kubernetes pod: a running pod has its endpoint, UID and start") {
  const Pod pod = RequireOk(PodFromObject(PodObject(R"({"phase": "Running", "podIP": "10.1.2.3",
      "containerStatuses": [{"name": "other", "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
        {"name": "share-manager", "state": {"running": {"startedAt": "2026-12-02T01:02:03Z"}}}]})"),
                                          Shipped()));
  CHECK(pod.name == "share-manager-pvc-a-e2");
  CHECK(pod.volume == "pvc-a");
  CHECK(pod.epoch == 2);
  CHECK(pod.phase == PodPhase::kRunning);
  CHECK(pod.endpoint == "10.1.2.3:9600");
  CHECK(pod.nfs_port == 2049);
  CHECK(pod.uid == "u-2");
  CHECK(pod.started_unix_ms == 1'796'173'323'000);
  CHECK_FALSE(pod.terminating);
}

TEST_CASE("kubernetes pod: an ended pod says how, in its own words") {
  const Pod pod = RequireOk(PodFromObject(PodObject(R"({"phase": "Failed", "podIP": "fd00::5",
      "containerStatuses": [{"name": "share-manager", "state": {"terminated": {"exitCode": 3,
        "message": "exiting with code 3: ganesha died 6 times\n"}}}]})"),
                                          Shipped()));
  CHECK(pod.phase == PodPhase::kFailed);
  CHECK(pod.exit_code == 3);
  CHECK(pod.termination_message == "exiting with code 3: ganesha died 6 times");
  CHECK(pod.endpoint == "[fd00::5]:9600");
}

TEST_CASE("kubernetes pod: a new pod is pending, a deleted one terminating, a stranger refused") {
  CHECK(RequireOk(PodFromObject(PodObject("{}"), Shipped())).phase == PodPhase::kPending);
  CHECK(RequireOk(PodFromObject(PodObject(R"({"phase": "Lost"})"), Shipped())).phase ==
        PodPhase::kUnknown);
  json going = PodObject(R"({"phase": "Running"})");
  going["metadata"]["deletionTimestamp"] = "2026-12-02T01:02:03Z";
  CHECK(RequireOk(PodFromObject(going, Shipped())).terminating);
  json stranger = PodObject("{}");
  stranger["metadata"]["labels"].erase("share-manager/epoch");
  CHECK(PodFromObject(stranger, Shipped()).status().code() == absl::StatusCode::kInvalidArgument);
  stranger["metadata"]["labels"]["share-manager/epoch"] = "two";
  CHECK(PodFromObject(stranger, Shipped()).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace controller::kubernetes
