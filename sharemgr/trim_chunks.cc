#include "sharemgr/trim_chunks.h"

#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/byte_size.h"

namespace sharemgr {
namespace {

std::string Progress(uint64_t trimmed, uint64_t start, uint64_t total_bytes) {
  return absl::StrCat("trimmed ", base::FormatBytes(trimmed), " in the first ",
                      base::FormatBytes(start), " of ", base::FormatBytes(total_bytes),
                      "; the rest is untrimmed, run trim again (it starts over)");
}

}  // namespace

absl::StatusOr<uint64_t> TrimInChunks(uint64_t total_bytes, uint64_t chunk_bytes,
                                      base::TimePoint deadline, const base::TimeSource& clock,
                                      const TrimStopFn& stop, const TrimRangeFn& trim_range) {
  if (chunk_bytes == 0) return absl::InvalidArgumentError("trim: a chunk of 0 bytes");
  uint64_t trimmed = 0;
  for (uint64_t start = 0; start < total_bytes;) {
    if (auto go_on = stop(); !go_on.ok()) {
      return absl::Status(
          go_on.code(), absl::StrCat(go_on.message(), ": ", Progress(trimmed, start, total_bytes)));
    }
    const bool last = total_bytes - start <= chunk_bytes;
    const uint64_t len = last ? std::numeric_limits<uint64_t>::max() - start : chunk_bytes;
    auto range = trim_range(start, len);
    if (!range.ok()) return range.status();
    trimmed += *range;
    start = last ? total_bytes : start + chunk_bytes;
    if (start < total_bytes && clock.Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("trim stopped at its deadline (--max-volume-op-time or the caller's): ",
                       Progress(trimmed, start, total_bytes)));
    }
  }
  return trimmed;
}

base::TimePoint TrimWorkDeadline(base::TimePoint now, base::Duration max_op_time,
                                 base::TimePoint caller_gives_up) {
  const auto answer_margin = std::clamp<base::Clock::duration>(
      (caller_gives_up - now) / 10, base::Clock::duration::zero(), std::chrono::seconds(5));
  return std::min(now + max_op_time, caller_gives_up - answer_margin);
}

}  // namespace sharemgr
