#include "controller/store/share_records.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/str_cat.h"

namespace controller {

absl::Status ShareNotFound(const std::string& name) {
  return absl::NotFoundError(absl::StrCat("share ", name, " not found"));
}

absl::Status ShareExists(const std::string& name) {
  return absl::AlreadyExistsError(absl::StrCat("share ", name, " exists"));
}

absl::Status CheckVersion(const ShareRecord& current, const ShareRecord& write) {
  if (current.resource_version() == write.resource_version()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat("conflict: share ", write.name(), " is at version ",
                                         current.resource_version(), ", write carried ",
                                         write.resource_version()));
}

ShareRecord CreatedRecord(ShareRecord record) {
  record.set_spec_generation(1);
  return record;
}

ShareRecord UpdatedRecord(const ShareRecord& current, const ShareRecord& write) {
  ShareRecord stored = write;
  const bool spec_changed =
      !google::protobuf::util::MessageDifferencer::Equals(current.spec(), write.spec());
  stored.set_spec_generation(current.spec_generation() + (spec_changed ? 1 : 0));
  return stored;
}

absl::StatusOr<std::string> RecordToJson(const ShareRecord& record) {
  std::string json;
  if (auto s = google::protobuf::util::MessageToJsonString(record, &json); !s.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot encode share ", record.name(), ": ", s.ToString()));
  }
  return json;
}

absl::StatusOr<ShareRecord> RecordFromJson(absl::string_view json) {
  ShareRecord record;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &record);
  if (!parsed.ok()) return absl::DataLossError(parsed.ToString());
  return record;
}

}  // namespace controller
