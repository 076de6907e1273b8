// How often a log line (or any text) appears in a process's output: tests
// assert "exactly once" (one repair, one refusal logged), not just "present".
#pragma once

#include <cstddef>
#include <string>

namespace testing_support {

inline size_t CountOccurrences(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

}  // namespace testing_support
