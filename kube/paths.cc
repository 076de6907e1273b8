#include "kube/paths.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kube {

std::string ResourcePath(const ResourceRef& ref) {
  std::string path =
      ref.group.empty() ? absl::StrCat("/api/", UrlEscape(ref.version))
                        : absl::StrCat("/apis/", UrlEscape(ref.group), "/", UrlEscape(ref.version));
  if (!ref.namespace_name.empty()) {
    absl::StrAppend(&path, "/namespaces/", UrlEscape(ref.namespace_name));
  }
  absl::StrAppend(&path, "/", UrlEscape(ref.plural));
  if (!ref.name.empty()) absl::StrAppend(&path, "/", UrlEscape(ref.name));
  if (!ref.subresource.empty()) absl::StrAppend(&path, "/", UrlEscape(ref.subresource));
  return path;
}

std::string UrlEscape(absl::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
        c == '~') {
      out.push_back(c);
    } else {
      const auto byte = static_cast<unsigned char>(c);
      out.push_back('%');
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0xf]);
    }
  }
  return out;
}

}  // namespace kube
