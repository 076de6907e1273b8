#include "controller/ha/serving_lease_start_rule.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "etcd/serving_lease_record.h"

namespace controller {
namespace {

// The epoch a key's value names, or the value itself when it does not parse
// (it is only named).
std::string EpochIn(const std::string& value) {
  if (const auto epoch = etcd::EpochOf(value)) return absl::StrCat(*epoch);
  return absl::StrCat("'", value, "'");
}

std::optional<uint64_t> EpochIn(const std::optional<std::string>& value) {
  return value ? etcd::EpochOf(*value) : std::nullopt;
}

int64_t Ms(base::Duration d) { return d.count(); }

}  // namespace

std::optional<int64_t> RecordedLeaseToAsk(const ServingLeaseKeys& keys) {
  if (keys.holder || !keys.recorded) return std::nullopt;
  return etcd::RecordedLeaseOf(*keys.recorded);
}

StartCheck ServingLeaseStartRule::Check(const std::string& volume, uint64_t epoch,
                                        const ServingLeaseKeys& keys, base::TimePoint now) {
  const StartCheck seen{.recorded_epoch = EpochIn(keys.recorded),
                        .holder_epoch = EpochIn(keys.holder)};
  const auto not_ready = [&](int64_t retry_after_ms, std::string waiting_for) {
    StartCheck out = seen;
    out.ready = false;
    out.retry_after_ms = retry_after_ms;
    out.waiting_for = std::move(waiting_for);
    return out;
  };
  if (keys.recorded && !seen.recorded_epoch) {
    // No pod could take the lease over it (its share-manager refuses the
    // record): nothing starts until someone mends it.
    seen_gone_.erase(volume);
    return not_ready(Ms(poll_), absl::StrCat("the epoch record of ", volume, " ('", *keys.recorded,
                                             "', not an epoch) to be mended by hand"));
  }
  if (seen.holder_epoch == epoch && seen.recorded_epoch.value_or(0) <= epoch) {
    // A pod of this very epoch holds the lease: it runs, though the asker's
    // list of pods does not show it yet (a lagging list, a Create whose
    // answer was lost). Moving above it would replace a healthy server.
    seen_gone_.erase(volume);
    return not_ready(Ms(poll_), absl::StrCat("the serving lease is held by epoch ", epoch,
                                             " itself: its pod runs, not yet listed"));
  }
  const uint64_t taken = std::max(seen.recorded_epoch.value_or(0), seen.holder_epoch.value_or(0));
  if (taken >= epoch && (seen.recorded_epoch || seen.holder_epoch)) {
    // Its pod would be refused the lease (superseded): the share must move
    // above (Reconciler::CreatePod).
    seen_gone_.erase(volume);
    return not_ready(Ms(poll_), absl::StrCat("an epoch above ", taken, ", the one taken in etcd (",
                                             epoch, " is not)"));
  }
  if (keys.holder) {
    seen_gone_.erase(volume);
    return not_ready(Ms(poll_),
                     absl::StrCat("the serving lease of epoch ", EpochIn(*keys.holder), " to end"));
  }
  if (!keys.recorded) return seen;  // never held: the first pod
  const std::string recorded = EpochIn(*keys.recorded);
  const std::optional<int64_t> lease = etcd::RecordedLeaseOf(*keys.recorded);
  if (lease && keys.recorded_lease_ttl.value_or(0) >= 0) {
    // Its key is gone (deleted by hand?) but its holder's etcd lease lives:
    // that holder serves until its next renewal reads the key gone. etcd
    // reports the TTL in whole seconds, truncated: 0 may leave most of a
    // second, so only "not found" (-1: revoked, or expired and revoked)
    // counts as gone.
    seen_gone_.erase(volume);
    return not_ready(Ms(poll_), absl::StrCat("the etcd lease ", absl::Hex(*lease), " of epoch ",
                                             recorded, " to end (its key is gone)"));
  }
  // Counted for this record only: another holder's record (one that took
  // the key and ended meanwhile, unseen) starts the count again.
  auto [gone, first] = seen_gone_.try_emplace(volume, SeenGone{*keys.recorded, now});
  if (!first && gone->second.record != *keys.recorded) {
    gone->second = SeenGone{*keys.recorded, now};
    first = true;
  }
  if (first && lease) {
    spdlog::info("{}: the serving lease of epoch {} is gone; epoch {} starts in {}", volume,
                 recorded, epoch, base::FormatDuration(drift_margin_));
  } else if (first) {
    spdlog::warn(
        "{}: the key of epoch {} is gone and its record names no etcd lease (an unknown "
        "holder: its share-manager waits a whole TTL for it); epoch {} starts in {}",
        volume, recorded, epoch, base::FormatDuration(drift_margin_));
  }
  const base::TimePoint due = gone->second.at + drift_margin_;
  if (now >= due) {
    // The pod created now may take the key and lose it before the next
    // replacement asks: that one counts its margin from its own sighting.
    seen_gone_.erase(gone);
    return seen;
  }
  return not_ready(Ms(std::chrono::ceil<base::Duration>(due - now)),
                   absl::StrCat("the drift margin (", base::FormatDuration(drift_margin_),
                                ") after the serving lease of epoch ", recorded, " ended",
                                lease ? "" : " (its holder unknown: the record names no lease)"));
}

}  // namespace controller
