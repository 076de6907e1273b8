// The paths of the apiserver's resources, and query values escaped for them.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace kube {

// A resource's collection, one object of it, or an object's subresource.
// group "" is the core group (/api/v1); namespace_name "" a cluster-scoped
// resource or every namespace's; name "" the collection.
struct ResourceRef {
  std::string group;
  std::string version;
  std::string namespace_name;
  std::string plural;
  std::string name;
  std::string subresource;
};

// E.g. /api/v1/namespaces/ns/configmaps/a or
// /apis/sharemanager.io/v1/namespaces/ns/shares/a/status.
std::string ResourcePath(const ResourceRef& ref);

// Percent-encodes everything but RFC 3986's unreserved characters, for a
// query value (a label selector's "=" and ",") or a path segment.
std::string UrlEscape(absl::string_view value);

}  // namespace kube
