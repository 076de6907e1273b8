#include "kube/object.h"

#include "absl/strings/numbers.h"

namespace kube {

uint64_t VersionNumber(const std::string& resource_version) {
  uint64_t version = 0;
  return absl::SimpleAtoi(resource_version, &version) ? version : 0;
}

std::string StringAt(const nlohmann::json& object, std::initializer_list<const char*> path) {
  const nlohmann::json* at = &object;
  for (const char* key : path) {
    if (!at->is_object()) return "";
    const auto next = at->find(key);
    if (next == at->end()) return "";
    at = &*next;
  }
  return at->is_string() ? at->get<std::string>() : "";
}

}  // namespace kube
