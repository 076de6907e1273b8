// Byte counts as flags take them and as humans read them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace base {

// Parses a size the way Kubernetes writes memory quantities: a bare number of
// bytes, or a number with a decimal (k, M, G, T) or binary (Ki, Mi, Gi, Ti)
// suffix: "1048576", "300M", "512Mi", "1.5Gi". Rejects negatives, other
// suffixes and values over 2^63 bytes.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

// "812 B", "1.5 KiB", "45.2 MiB", "1.2 GiB": binary units, one decimal.
std::string FormatBytes(uint64_t bytes);

}  // namespace base
