// What every Store does the same way, whatever keeps the records: the errors
// it answers with, what a Create and an Update store (spec_generation), and
// the JSON form a record is kept in.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "controller/store/store.h"

namespace controller {

absl::Status ShareNotFound(const std::string& name);
absl::Status ShareExists(const std::string& name);

// OK when `write` carries `current`'s resource_version; the conflict
// (ABORTED) otherwise.
absl::Status CheckVersion(const ShareRecord& current, const ShareRecord& write);

// What a Create stores: `record` at spec_generation 1 (its resource_version
// is the store's to set).
ShareRecord CreatedRecord(ShareRecord record);
// What an Update of `current` stores: `write`, its spec_generation one past
// `current`'s when the spec changed, the same otherwise (its
// resource_version is the store's to set).
ShareRecord UpdatedRecord(const ShareRecord& current, const ShareRecord& write);

// One line of JSON. InternalError naming the share when it cannot be encoded.
absl::StatusOr<std::string> RecordToJson(const ShareRecord& record);
// DataLoss saying what is wrong when `json` is not a ShareRecord.
absl::StatusOr<ShareRecord> RecordFromJson(absl::string_view json);

}  // namespace controller
