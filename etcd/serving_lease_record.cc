#include "etcd/serving_lease_record.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace etcd {
namespace {

constexpr size_t kEpochDigits = 20;

}  // namespace

std::string PaddedEpoch(uint64_t epoch) { return absl::StrFormat("%020u", epoch); }

std::optional<uint64_t> EpochOf(const std::string& value) {
  uint64_t epoch = 0;
  if (value.size() < kEpochDigits || !absl::SimpleAtoi(value.substr(0, kEpochDigits), &epoch)) {
    return std::nullopt;
  }
  return epoch;
}

std::string HolderOf(const std::string& value) {
  return value.size() > kEpochDigits + 1 ? value.substr(kEpochDigits + 1) : std::string("?");
}

std::optional<int64_t> RecordedLeaseOf(const std::string& value) {
  uint64_t lease = 0;
  if (value.size() <= kEpochDigits + 1 ||
      !absl::SimpleHexAtoi(value.substr(kEpochDigits + 1), &lease) || lease == 0) {
    return std::nullopt;
  }
  return static_cast<int64_t>(lease);
}

std::string EpochRecord(uint64_t epoch, int64_t lease) {
  return absl::StrCat(PaddedEpoch(epoch), " ", absl::Hex(lease));
}

}  // namespace etcd
