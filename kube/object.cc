#include "kube/object.h"

namespace kube {

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
