#include "kube/watch_lines.h"

#include "absl/strings/str_cat.h"

namespace kube {

std::vector<std::string> LineSplitter::Feed(absl::string_view bytes) {
  std::vector<std::string> lines;
  size_t newline;
  while ((newline = bytes.find('\n')) != absl::string_view::npos) {
    absl::StrAppend(&partial_, bytes.substr(0, newline));
    bytes.remove_prefix(newline + 1);
    if (!partial_.empty()) lines.push_back(std::move(partial_));
    partial_.clear();
  }
  absl::StrAppend(&partial_, bytes);
  return lines;
}

absl::StatusOr<WatchEvent> ParseWatchEvent(absl::string_view line) {
  auto event = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  constexpr size_t kShown = 200;
  const auto shown = [&] {
    return absl::StrCat("\"", line.substr(0, kShown), line.size() > kShown ? "...\"" : "\"");
  };
  if (event.is_discarded() || !event.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("a watch event that is not JSON: ", shown()));
  }
  const auto type = event.find("type");
  const auto object = event.find("object");
  if (type == event.end() || !type->is_string() || object == event.end() || !object->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a watch event without a type and an object: ", shown()));
  }
  return WatchEvent{.type = type->get<std::string>(), .object = std::move(*object)};
}

}  // namespace kube
