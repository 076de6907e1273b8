// YAML manifests (a pod template, the CRD) as the JSON the apiserver takes.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace kube {

// The one document in `text`, as JSON: a quoted scalar stays a string; an
// unquoted one is a boolean (true, false), null (null, ~ or empty), an
// integer (a leading 0 makes it octal, as YAML 1.1 and Kubernetes read a
// file mode like 0400), or else a string. What
// `what` names (a file) goes into the error when the YAML does not parse.
absl::StatusOr<nlohmann::json> YamlToJson(const std::string& text, const std::string& what);

}  // namespace kube
