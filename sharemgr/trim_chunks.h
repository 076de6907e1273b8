// Trimming a filesystem range by range, so that the work stops at a deadline.
// One FITRIM over the whole filesystem cannot be interrupted: on slow or thin
// storage it holds the device thread (and every other volume operation) for
// as long as the discards take, up to an hour. One over a bounded range ends
// soon, and between ranges the deadline and the owner's stop (a fence, a
// stop, a queued repair) are looked at.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "base/clock.h"

namespace sharemgr {

// A trim's range; FITRIM's `len` past the filesystem's end is clamped by the kernel.
using TrimRangeFn = std::function<absl::StatusOr<uint64_t>(uint64_t start, uint64_t len)>;
// Whether the trim may go on: OK, or why it must stop now (its code is the
// trim's: CANCELLED, FAILED_PRECONDITION).
using TrimStopFn = std::function<absl::Status()>;

// Trims [0, total_bytes) as successive ranges of `chunk_bytes` (> 0), in
// order, each once; `trim_range` returns the bytes it trimmed. The caller
// gives the filesystem's real size and a range of its whole allocation units
// (see Volume::Trim). The last range is open-ended ([start, UINT64_MAX)):
// ext4 and xfs clamp a range to their end, so nothing past it is missed. After each range, one past
// `deadline` (on `clock`) stops the trim with DEADLINE_EXCEEDED saying how much was trimmed and how
// far it got: the first range always runs, so a trim that started makes progress. Untrimmed free
// space is harmless (the next trim covers it). `stop` is asked before every range, the first
// included: a trim whose volume is fenced (another node may own it now), stopping, or wanted by a
// repair issues no further FITRIM; its error says why and how far it got.
// A range's error ends the trim with that error. Returns the bytes trimmed.
absl::StatusOr<uint64_t> TrimInChunks(uint64_t total_bytes, uint64_t chunk_bytes,
                                      base::TimePoint deadline, const base::TimeSource& clock,
                                      const TrimStopFn& stop, const TrimRangeFn& trim_range);

// The deadline of a trim's work that starts at `now`: `max_op_time` after it,
// and before the caller stops waiting by a tenth of its remaining wait (5 s at
// most), so that a trim cut short by either still answers how far it got
// instead of the caller's bare DEADLINE_EXCEEDED.
base::TimePoint TrimWorkDeadline(base::TimePoint now, base::Duration max_op_time,
                                 base::TimePoint caller_gives_up);

}  // namespace sharemgr
