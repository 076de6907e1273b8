#include "controller/serving_lease_start_rule.h"

#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace controller {
namespace {

// "<epoch, 20 digits>[ <holder>]" -> the epoch, or the value itself when it
// does not parse (it is only named).
std::string EpochIn(const std::string& value) {
  uint64_t epoch = 0;
  if (value.size() >= 20 && absl::SimpleAtoi(value.substr(0, 20), &epoch)) {
    return absl::StrCat(epoch);
  }
  return absl::StrCat("'", value, "'");
}

int64_t Ms(base::Duration d) { return d.count(); }

}  // namespace

StartCheck ServingLeaseStartRule::Check(const std::string& volume, uint64_t epoch,
                                        const std::optional<std::string>& holder,
                                        const std::optional<std::string>& recorded,
                                        base::TimePoint now) {
  if (holder) {
    seen_gone_.erase(volume);
    return StartCheck{
        .ready = false,
        .retry_after_ms = Ms(poll_),
        .waiting_for = absl::StrCat("the serving lease of epoch ", EpochIn(*holder), " to end")};
  }
  if (!recorded) return StartCheck{};  // never held: the first pod
  const auto [gone, first] = seen_gone_.try_emplace(volume, now);
  if (first) {
    spdlog::info("{}: the serving lease of epoch {} is gone; epoch {} starts in {}", volume,
                 EpochIn(*recorded), epoch, base::FormatDuration(drift_margin_));
  }
  const base::TimePoint due = gone->second + drift_margin_;
  if (now >= due) {
    // The pod created now may take the key and lose it before the next
    // replacement asks: that one counts its margin from its own sighting.
    seen_gone_.erase(gone);
    return StartCheck{};
  }
  return StartCheck{.ready = false,
                    .retry_after_ms = Ms(std::chrono::ceil<base::Duration>(due - now)),
                    .waiting_for = absl::StrCat(
                        "the drift margin (", base::FormatDuration(drift_margin_),
                        ") after the serving lease of epoch ", EpochIn(*recorded), " ended")};
}

}  // namespace controller
