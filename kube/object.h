// Fields of the objects an apiserver sends. A broken or hostile one may send
// any shape: a field that is missing or not a string reads as "", never as
// an exception.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "nlohmann/json.hpp"

namespace kube {

// The string at `path` (keys from the top, e.g. {"metadata", "uid"}).
std::string StringAt(const nlohmann::json& object, std::initializer_list<const char*> path);

inline std::string MetadataString(const nlohmann::json& object, const char* key) {
  return StringAt(object, {"metadata", key});
}

// A resourceVersion as a number, to tell which of two is newer: opaque to
// clients in general, an etcd revision on every apiserver. 0 when it is none.
uint64_t VersionNumber(const std::string& resource_version);
inline uint64_t VersionNumber(const nlohmann::json& object) {
  return VersionNumber(MetadataString(object, "resourceVersion"));
}

}  // namespace kube
