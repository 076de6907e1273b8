#include "controller/serving_lease_gate.h"

#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace controller {
namespace {

using base::TimePoint;

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

ServingLeaseGate::ServingLeaseGate(PodRuntime& runtime, std::shared_ptr<etcd::EtcdClient> client,
                                   ServingLeaseGateOptions options, const base::TimeSource& clock)
    : runtime_(runtime), client_(std::move(client)), options_(std::move(options)), clock_(clock) {}

absl::StatusOr<StartCheck> ServingLeaseGate::CheckStart(
    const sharemanager::controller::v1::ShareSpec& spec, uint64_t epoch) {
  const std::string lease_key = absl::StrCat(options_.prefix, "/leases/", spec.volume());
  const std::string epoch_key = absl::StrCat(options_.prefix, "/epochs/", spec.volume());
  // Both at one revision.
  etcdserverpb::TxnRequest txn;
  txn.add_success()->mutable_request_range()->set_key(lease_key);
  txn.add_success()->mutable_request_range()->set_key(epoch_key);
  auto read = client_->Txn(txn);
  if (!read.ok()) return read.status();
  const TimePoint now = clock_.Now();
  const auto& holder = read->responses(0).response_range().kvs();
  const auto& recorded = read->responses(1).response_range().kvs();
  absl::MutexLock lock(&mu_);
  if (!holder.empty()) {
    seen_gone_.erase(spec.volume());
    return StartCheck{.ready = false,
                      .retry_after_ms = Ms(options_.poll),
                      .waiting_for = absl::StrCat("the serving lease of epoch ",
                                                  EpochIn(holder[0].value()), " to end")};
  }
  if (recorded.empty()) return StartCheck{};  // never held: the first pod
  const auto [gone, first] = seen_gone_.try_emplace(spec.volume(), now);
  if (first) {
    spdlog::info("{}: the serving lease of epoch {} is gone; epoch {} starts in {}", spec.volume(),
                 EpochIn(recorded[0].value()), epoch, base::FormatDuration(options_.drift_margin));
  }
  const TimePoint due = gone->second + options_.drift_margin;
  if (now >= due) {
    // The pod created now may take the key and lose it before the next
    // replacement asks: that one counts its margin from its own sighting.
    seen_gone_.erase(gone);
    return StartCheck{};
  }
  return StartCheck{
      .ready = false,
      .retry_after_ms = Ms(std::chrono::ceil<base::Duration>(due - now)),
      .waiting_for = absl::StrCat("the drift margin (", base::FormatDuration(options_.drift_margin),
                                  ") after the serving lease of epoch ",
                                  EpochIn(recorded[0].value()), " ended")};
}

}  // namespace controller
