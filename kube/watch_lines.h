// A watch's body as the apiserver streams it: one JSON event a line, the
// lines cut anywhere by the transport (an event over several reads, several
// events in one).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace kube {

struct WatchEvent {
  std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK or ERROR
  nlohmann::json object;
};

// Collects bytes as they arrive and hands out each whole line.
class LineSplitter {
 public:
  // The lines `bytes` completes, without their '\n' (empty lines dropped).
  std::vector<std::string> Feed(absl::string_view bytes);
  // Bytes of a line not ended yet: a stream that ends with some was cut.
  size_t pending() const { return partial_.size(); }

 private:
  std::string partial_;
};

// One line as an event; InvalidArgument naming what is wrong otherwise.
absl::StatusOr<WatchEvent> ParseWatchEvent(absl::string_view line);

}  // namespace kube
