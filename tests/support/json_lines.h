// Log output checked by a JSON parser this project did not write (Python's
// json module, strict: no NaN, no raw control characters): every line one
// object with the stable fields of --log-format json.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace testing_support {

// Each line of `text` parsed; an error naming the first line that is not a
// JSON object whose "time" is RFC 3339 UTC with milliseconds, whose "level"
// is one of spdlog's names and whose "component" and "message" are strings.
// Otherwise every line again, as Python writes it back: keys sorted, ASCII
// only (`"key": value`, non-ASCII and control characters as \uXXXX escapes),
// so a test can look for a field and its value as text.
absl::StatusOr<std::vector<std::string>> ParseJsonLines(const std::string& text);

}  // namespace testing_support
