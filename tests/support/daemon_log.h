// When things happened, read from a share-manager's log: each line starts
// with its wall-clock time ("2026-11-30T20:35:07.308+00:00 info ..."), which
// a test compares with absl::Now() taken on the same machine.
#pragma once

#include <optional>
#include <string>

#include "absl/time/time.h"

namespace testing_support {

// The keeper's debug line for each confirmed renewal: "serving lease renewed
// (answered in 3ms); valid 3.19s more".
inline constexpr char kLeaseRenewedLine[] = "serving lease renewed";

// The time of the first line of `log` containing `text` at or after byte
// `from`, or nullopt.
std::optional<absl::Time> LoggedAt(const std::string& log, const std::string& text,
                                   size_t from = 0);

// The latest valid_until the log tells of, on the wall clock: each renewal
// line's time plus the validity it says is left. (The time is taken when the
// line is written, just after the answer: a bound on the late side.)
std::optional<absl::Time> LoggedValidUntil(const std::string& log);

}  // namespace testing_support
