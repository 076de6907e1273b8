// Lets fmt and spdlog print absl::string_view (Debian's abseil keeps its own
// string_view type, so absl::Status::message() is not a std::string_view).
#pragma once

#include <fmt/format.h>

#include "absl/strings/string_view.h"

template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view s, FormatContext& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};
