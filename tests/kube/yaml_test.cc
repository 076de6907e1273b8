// Manifests read as Kubernetes reads them: the scalars' types, octal modes,
// and YAML that does not parse named.
#include "kube/yaml.h"

#include <doctest/doctest.h>

#include "tests/support/require_ok.h"

namespace kube {
namespace {

using nlohmann::json;
using testing_support::RequireOk;

TEST_CASE("yaml: scalars are typed as Kubernetes reads them, quoted ones stay strings") {
  const json got = RequireOk(YamlToJson(R"(
kind: Pod
spec:
  terminationGracePeriodSeconds: 45
  automountServiceAccountToken: false
  enabled: True
  nothing: ~
  empty:
  mode: 0400
  zero: 0
  quoted: "True"
  version: '1'
  args: [--volume=pvc-a, "--epoch=1"]
)",
                                        "pod.yaml"));
  CHECK(got == json::parse(R"({"kind": "Pod", "spec": {
    "terminationGracePeriodSeconds": 45, "automountServiceAccountToken": false,
    "enabled": true, "nothing": null, "empty": null, "mode": 256, "zero": 0,
    "quoted": "True", "version": "1", "args": ["--volume=pvc-a", "--epoch=1"]}})"));
}

TEST_CASE("yaml: what does not parse is refused, naming the file") {
  const auto got = YamlToJson("a: [1, 2\nb: }", "template.yaml");
  CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(got.status().message()).find("template.yaml") != std::string::npos);
}

}  // namespace
}  // namespace kube
