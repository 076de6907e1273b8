#include "kube/yaml.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kube {
namespace {

nlohmann::json Convert(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& item : node) out[item.first.as<std::string>()] = Convert(item.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& item : node) out.push_back(Convert(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string text = node.as<std::string>();
      if (node.Tag() == "!") return text;  // quoted
      if (text == "true" || text == "True" || text == "TRUE") return true;
      if (text == "false" || text == "False" || text == "FALSE") return false;
      if (text == "null" || text == "~") return nullptr;
      int64_t number = 0;
      // YAML 1.1, as Kubernetes' own reader: 0400 (a file mode) is octal.
      if (text.size() > 1 && text[0] == '0' &&
          text.find_first_not_of("01234567", 1) == std::string::npos) {
        errno = 0;
        const long long octal = std::strtoll(text.c_str(), nullptr, 8);
        if (errno != ERANGE) return octal;
        return text;  // too long for a number: the text it is
      }
      if (absl::SimpleAtoi(text, &number)) return number;
      return text;
    }
    default:
      return nullptr;
  }
}

}  // namespace

absl::StatusOr<nlohmann::json> YamlToJson(const std::string& text, const std::string& what) {
  try {
    return Convert(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not YAML: ", e.what()));
  }
}

}  // namespace kube
