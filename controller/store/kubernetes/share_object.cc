#include "controller/store/kubernetes/share_object.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace controller::kubernetes {
namespace {

namespace v1 = sharemanager::controller::v1;
using nlohmann::json;

// A cleared condition has no reason in the record; Kubernetes wants one.
constexpr char kClearedReason[] = "Cleared";
constexpr char kTimeFormat[] = "%Y-%m-%d%ET%H:%M:%E3SZ";
// deploy/base/crd.yaml: a condition's message is at most this long.
constexpr size_t kMaxMessageBytes = 32768;

std::string Truncated(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut);
}

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(kKind, " field ", field, ": ", why));
}

// Each reader: absent (or null) is the field's zero value, as in the record.
absl::StatusOr<std::string> String(const json& parent, const char* key, const std::string& field) {
  const auto it = parent.find(key);
  if (it == parent.end() || it->is_null()) return std::string();
  if (!it->is_string()) return Bad(field, "not a string");
  return it->get<std::string>();
}

absl::StatusOr<uint64_t> Unsigned(const json& parent, const char* key, const std::string& field,
                                  uint64_t max = uint64_t{std::numeric_limits<int64_t>::max()}) {
  const auto it = parent.find(key);
  if (it == parent.end() || it->is_null()) return uint64_t{0};
  if (!it->is_number_integer() || (!it->is_number_unsigned() && it->get<int64_t>() < 0)) {
    return Bad(field, "not a non-negative integer");
  }
  const auto value = it->get<uint64_t>();
  if (value > max) return Bad(field, absl::StrCat("above ", max));
  return value;
}

absl::StatusOr<int64_t> Time(const json& parent, const char* key, const std::string& field) {
  auto text = String(parent, key, field);
  if (!text.ok()) return text.status();
  if (text->empty()) return int64_t{0};
  auto ms = ParseTime(*text);
  if (!ms.ok()) return Bad(field, std::string(ms.status().message()));
  return ms;
}

const json& Object(const json& parent, const char* key) {
  static const json kEmpty = json::object();
  const auto it = parent.find(key);
  return it == parent.end() || !it->is_object() ? kEmpty : *it;
}

absl::Status ReadCondition(const json& item, const std::string& field, v1::Condition& c) {
  if (!item.is_object()) return Bad(field, "not an object");
  auto type = String(item, "type", field + ".type");
  auto status = String(item, "status", field + ".status");
  auto reason = String(item, "reason", field + ".reason");
  auto message = String(item, "message", field + ".message");
  auto changed = Time(item, "lastTransitionTime", field + ".lastTransitionTime");
  for (const absl::Status& s :
       {type.status(), status.status(), reason.status(), message.status(), changed.status()}) {
    if (!s.ok()) return s;
  }
  if (*status != "True" && *status != "False") return Bad(field + ".status", "not True or False");
  c.set_type(*type);
  c.set_status(*status == "True");
  c.set_reason(*reason == kClearedReason ? "" : *reason);
  c.set_message(*message);
  c.set_last_transition_unix_ms(*changed);
  return absl::OkStatus();
}

absl::Status ReadStatus(const json& st, v1::ShareStatusRecord& out) {
  auto phase_name = String(st, "phase", ".status.phase");
  if (!phase_name.ok()) return phase_name.status();
  v1::Phase phase = v1::PHASE_UNSPECIFIED;
  if (!phase_name->empty() && !v1::Phase_Parse(*phase_name, &phase)) {
    return Bad(".status.phase", absl::StrCat("unknown phase '", *phase_name, "'"));
  }
  out.set_phase(phase);
  auto reason = String(st, "reason", ".status.reason");
  auto pod = String(st, "pod", ".status.pod");
  auto endpoint = String(st, "endpoint", ".status.endpoint");
  auto epoch = Unsigned(st, "epoch", ".status.epoch");
  auto requested = Unsigned(st, "remountRequestedGeneration", ".status.remountRequestedGeneration");
  auto requested_at = Time(st, "remountRequestedTime", ".status.remountRequestedTime");
  auto acknowledged =
      Unsigned(st, "remountAcknowledgedGeneration", ".status.remountAcknowledgedGeneration");
  auto observed = Unsigned(st, "observedGeneration", ".status.observedGeneration");
  auto replacements =
      Unsigned(st, "replacements", ".status.replacements", std::numeric_limits<uint32_t>::max());
  auto replaced_at = Time(st, "lastReplacementTime", ".status.lastReplacementTime");
  auto created_at = Time(st, "podCreatedTime", ".status.podCreatedTime");
  for (const absl::Status& s :
       {reason.status(), pod.status(), endpoint.status(), epoch.status(), requested.status(),
        requested_at.status(), acknowledged.status(), observed.status(), replacements.status(),
        replaced_at.status(), created_at.status()}) {
    if (!s.ok()) return s;
  }
  out.set_reason(*reason);
  out.set_pod(*pod);
  out.set_endpoint(*endpoint);
  out.set_epoch(*epoch);
  out.set_remount_requested_generation(*requested);
  out.set_remount_requested_unix_ms(*requested_at);
  out.set_remount_acknowledged_generation(*acknowledged);
  out.set_observed_spec_generation(*observed);
  out.set_replacements(static_cast<uint32_t>(*replacements));
  out.set_last_replacement_unix_ms(*replaced_at);
  out.set_pod_created_unix_ms(*created_at);
  if (const auto it = st.find("conditions"); it != st.end() && !it->is_null()) {
    if (!it->is_array()) return Bad(".status.conditions", "not a list");
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string field = absl::StrCat(".status.conditions[", i, "]");
      if (auto s = ReadCondition((*it)[i], field, *out.add_conditions()); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

bool HasFinalizer(const json& metadata) {
  const auto it = metadata.find("finalizers");
  return it != metadata.end() && it->is_array() &&
         std::find(it->begin(), it->end(), kFinalizer) != it->end();
}

json SpecOf(const ShareRecord& record) {
  json flags = json::array();
  for (const auto& flag : record.spec().daemon_flags()) flags.push_back(flag);
  return {{"serve", record.spec().serve()}, {"daemonFlags", std::move(flags)}};
}

json StatusOf(const v1::ShareStatusRecord& st) {
  json out = json::object();
  auto put = [&](const char* key, auto value) {
    if (value != decltype(value){}) out[key] = value;
  };
  auto put_time = [&](const char* key, int64_t ms) {
    if (ms != 0) out[key] = FormatTime(ms);
  };
  out["phase"] = v1::Phase_Name(st.phase());
  put("reason", st.reason());
  put("pod", st.pod());
  put("endpoint", st.endpoint());
  put("epoch", st.epoch());
  put("observedGeneration", st.observed_spec_generation());
  put("remountRequestedGeneration", st.remount_requested_generation());
  put_time("remountRequestedTime", st.remount_requested_unix_ms());
  put("remountAcknowledgedGeneration", st.remount_acknowledged_generation());
  put("replacements", st.replacements());
  put_time("lastReplacementTime", st.last_replacement_unix_ms());
  put_time("podCreatedTime", st.pod_created_unix_ms());
  json conditions = json::array();
  for (const auto& c : st.conditions()) {
    json item = {{"type", c.type()},
                 {"status", c.status() ? "True" : "False"},
                 {"reason", c.reason().empty() ? kClearedReason : c.reason()},
                 {"lastTransitionTime", FormatTime(c.last_transition_unix_ms())},
                 {"observedGeneration", st.observed_spec_generation()}};
    // The schema's bound (a message quoting a long error): cut at a UTF-8
    // character's start. Persist ignores messages, so a cut one is never
    // rewritten for being different.
    if (!c.message().empty()) item["message"] = Truncated(c.message(), kMaxMessageBytes);
    conditions.push_back(std::move(item));
  }
  if (!conditions.empty()) out["conditions"] = std::move(conditions);
  return out;
}

void SetResourceVersion(json& object, const ShareRecord& record) {
  object["metadata"]["resourceVersion"] = std::to_string(record.resource_version());
}

}  // namespace

std::string FormatTime(int64_t unix_ms) {
  return absl::FormatTime(kTimeFormat, absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

absl::StatusOr<int64_t> ParseTime(const std::string& text) {
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not an RFC 3339 time: ", error));
  }
  return absl::ToUnixMillis(t);
}

absl::StatusOr<ShareRecord> RecordFromObject(const json& object) {
  if (!object.is_object()) return Bad("(object)", "not an object");
  const json& metadata = Object(object, "metadata");
  auto name = String(metadata, "name", ".metadata.name");
  if (!name.ok()) return name.status();
  if (name->empty()) return Bad(".metadata.name", "missing");
  auto version = String(metadata, "resourceVersion", ".metadata.resourceVersion");
  if (!version.ok()) return version.status();
  uint64_t resource_version = 0;
  // Opaque to clients in general, but an etcd revision on every apiserver:
  // the store's versions are numbers, and a conflict is still the server's call.
  if (!absl::SimpleAtoi(*version, &resource_version)) {
    return Bad(".metadata.resourceVersion", absl::StrCat("'", *version, "' is not a number"));
  }
  auto generation = Unsigned(metadata, "generation", ".metadata.generation");
  if (!generation.ok()) return generation.status();

  ShareRecord record;
  record.set_name(*name);
  record.set_resource_version(resource_version);
  record.set_spec_generation(*generation);
  record.set_deletion_requested(metadata.contains("deletionTimestamp") &&
                                !metadata["deletionTimestamp"].is_null());

  const json& spec = Object(object, "spec");
  auto* out_spec = record.mutable_spec();
  out_spec->set_volume(*name);
  if (const auto it = spec.find("serve"); it == spec.end() || it->is_null()) {
    out_spec->set_serve(true);  // the schema's default, for objects from before it
  } else if (!it->is_boolean()) {
    return Bad(".spec.serve", "not true or false");
  } else {
    out_spec->set_serve(it->get<bool>());
  }
  if (const auto it = spec.find("daemonFlags"); it != spec.end() && !it->is_null()) {
    if (!it->is_array()) return Bad(".spec.daemonFlags", "not a list");
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string()) {
        return Bad(absl::StrCat(".spec.daemonFlags[", i, "]"), "not a string");
      }
      out_spec->add_daemon_flags((*it)[i].get<std::string>());
    }
  }
  if (auto s = ReadStatus(Object(object, "status"), *record.mutable_status()); !s.ok()) return s;
  record.mutable_status()->set_hold_record(HasFinalizer(metadata));
  return record;
}

json NewObject(const ShareRecord& record, const std::string& ns) {
  json object = {{"apiVersion", absl::StrCat(kGroup, "/", kVersion)},
                 {"kind", kKind},
                 {"metadata", {{"name", record.name()}, {"namespace", ns}}}};
  object = WithSpec(std::move(object), record);
  object["metadata"].erase("resourceVersion");
  return object;
}

json WithSpec(json object, const ShareRecord& record) {
  object["spec"] = SpecOf(record);
  json& metadata = object["metadata"];
  json finalizers = json::array();
  if (const auto it = metadata.find("finalizers"); it != metadata.end() && it->is_array()) {
    for (const auto& f : *it) {
      if (f != kFinalizer) finalizers.push_back(f);
    }
  }
  if (record.status().hold_record()) finalizers.push_back(kFinalizer);
  if (finalizers.empty()) {
    metadata.erase("finalizers");
  } else {
    metadata["finalizers"] = std::move(finalizers);
  }
  SetResourceVersion(object, record);
  return object;
}

json WithStatus(json object, const ShareRecord& record) {
  object["status"] = StatusOf(record.status());
  SetResourceVersion(object, record);
  return object;
}

}  // namespace controller::kubernetes
