// A record written as a ShareManager object and read back is the same
// record, field by field, and an object that cannot be a record is refused
// naming the field.
#include "controller/store/kubernetes/share_object.h"

#include <doctest/doctest.h>
#include <google/protobuf/util/message_differencer.h>

#include <string>

#include "tests/support/require_ok.h"

namespace controller::kubernetes {
namespace {

namespace pb = sharemanager::controller::v1;
using nlohmann::json;
using testing_support::RequireOk;

ShareRecord FullRecord() {
  ShareRecord r;
  r.set_name("pvc-a");
  r.set_resource_version(4711);
  r.set_spec_generation(3);
  r.mutable_spec()->set_volume("pvc-a");
  r.mutable_spec()->set_serve(true);
  r.mutable_spec()->add_daemon_flags("--stop-timeout=10s");
  r.mutable_spec()->add_daemon_flags("--grace-period=5");
  auto* st = r.mutable_status();
  st->set_phase(pb::RUNNING);
  st->set_reason("pod pvc-a-e2 serves");
  st->set_pod("pvc-a-e2");
  st->set_endpoint("10.1.2.3:9600");
  st->set_epoch(2);
  st->set_remount_requested_generation(5);
  st->set_remount_requested_unix_ms(1'764'000'000'123);
  st->set_remount_acknowledged_generation(4);
  st->set_observed_spec_generation(3);
  st->set_replacements(1);
  st->set_last_replacement_unix_ms(1'764'000'000'456);
  st->set_pod_created_unix_ms(1'764'000'000'789);
  st->set_hold_record(true);
  auto* healthy = st->add_conditions();
  healthy->set_type("Healthy");
  healthy->set_status(true);
  healthy->set_reason("Serving");
  healthy->set_message("ganesha answers");
  healthy->set_last_transition_unix_ms(1'764'000'000'001);
  auto* cleared = st->add_conditions();  // as ClearCondition leaves it
  cleared->set_type("MountFailed");
  cleared->set_status(false);
  cleared->set_last_transition_unix_ms(1'764'000'000'002);
  return r;
}

// What the apiserver hands back after the writes: the object with its
// metadata filled in.
json Stored(const ShareRecord& r) {
  json object = WithStatus(WithSpec(NewObject(r, "ns"), r), r);
  object["metadata"]["generation"] = r.spec_generation();
  object["metadata"]["resourceVersion"] = std::to_string(r.resource_version());
  if (r.deletion_requested()) object["metadata"]["deletionTimestamp"] = "2026-12-02T01:00:00Z";
  return object;
}

bool Same(const ShareRecord& a, const ShareRecord& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

TEST_CASE("share object: a record written and read back is the same record") {
  const ShareRecord record = FullRecord();
  const json object = Stored(record);
  CHECK(object["apiVersion"] == "share-manager.io/v1alpha1");
  CHECK(object["kind"] == "ShareManager");
  CHECK(object["metadata"]["namespace"] == "ns");
  CHECK(object["metadata"]["finalizers"] == json::array({kFinalizer}));
  CHECK(object["status"]["conditions"][1]["reason"] == "Cleared");  // Kubernetes wants one
  CHECK(object["status"]["conditions"][0]["observedGeneration"] == 3);
  CAPTURE(object.dump());
  CHECK(Same(RequireOk(RecordFromObject(object)), record));

  ShareRecord going = record;
  going.set_deletion_requested(true);
  going.mutable_status()->set_hold_record(false);
  CHECK(Same(RequireOk(RecordFromObject(Stored(going))), going));
}

TEST_CASE("share object: every field of the status reaches the object") {
  // A field added to the record and forgotten here would be lost on every
  // write: change each field alone and the object must change.
  const ShareRecord base = FullRecord();
  const auto* descriptor = pb::ShareStatusRecord::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const auto* f = descriptor->field(i);
    CAPTURE(f->name());
    ShareRecord changed = base;
    auto* st = changed.mutable_status();
    const auto* r = st->GetReflection();
    switch (f->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_STRING:
        r->SetString(st, f, "other");
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_BOOL:
        r->SetBool(st, f, !r->GetBool(*st, f));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_ENUM:
        r->SetEnumValue(st, f, pb::REPAIRING);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
        r->SetInt64(st, f, 1'700'000'000'000);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
        r->SetUInt64(st, f, 99);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT32:
        r->SetUInt32(st, f, 99);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE:
        st->mutable_conditions(0)->set_reason("Other");
        break;
      default:
        FAIL("a field type this test does not know: teach it");
    }
    CHECK(Stored(changed) != Stored(base));
    CHECK(Same(RequireOk(RecordFromObject(Stored(changed))), changed));
  }
}

TEST_CASE("share object: what else the object holds is kept, and only our finalizer moves") {
  ShareRecord record = FullRecord();
  json object = Stored(record);
  object["metadata"]["labels"] = {{"team", "a"}};
  object["metadata"]["finalizers"] = json::array({"example.com/backup", kFinalizer});
  record.mutable_status()->set_hold_record(false);
  json released = WithSpec(object, record);
  CHECK(released["metadata"]["labels"] == json({{"team", "a"}}));
  CHECK(released["metadata"]["finalizers"] == json::array({"example.com/backup"}));
  record.mutable_status()->set_hold_record(true);
  record.set_resource_version(99);
  const json held = WithSpec(released, record);
  CHECK(held["metadata"]["finalizers"] == json::array({"example.com/backup", kFinalizer}));
  CHECK(held["metadata"]["resourceVersion"] == "99");
  // The last one of ours leaves no empty list behind.
  object["metadata"]["finalizers"] = json::array({kFinalizer});
  record.mutable_status()->set_hold_record(false);
  CHECK_FALSE(WithSpec(object, record)["metadata"].contains("finalizers"));
}

TEST_CASE("share object: an object that cannot be a record is refused naming the field") {
  auto refused = [](json object, const std::string& field) {
    const auto got = RecordFromObject(object);
    CAPTURE(object.dump());
    CAPTURE(got.status());
    CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(got.status().message()).find(field) != std::string::npos);
  };
  const json good = Stored(FullRecord());
  auto with = [&](const json::json_pointer& at, json value) {
    json object = good;
    object[at] = std::move(value);
    return object;
  };
  refused(json::array(), "(object)");
  refused(with("/metadata/name"_json_pointer, ""), ".metadata.name");
  refused(with("/metadata/resourceVersion"_json_pointer, "abc"), ".metadata.resourceVersion");
  refused(with("/metadata/generation"_json_pointer, -1), ".metadata.generation");
  refused(with("/spec/serve"_json_pointer, "yes"), ".spec.serve");
  refused(with("/spec/daemonFlags"_json_pointer, "--x"), ".spec.daemonFlags");
  refused(with("/spec/daemonFlags/1"_json_pointer, 7), ".spec.daemonFlags[1]");
  refused(with("/status/phase"_json_pointer, "RUNNIN"), ".status.phase");
  refused(with("/status/epoch"_json_pointer, -2), ".status.epoch");
  refused(with("/status/replacements"_json_pointer, 1LL << 40), ".status.replacements");
  refused(with("/status/podCreatedTime"_json_pointer, "yesterday"), ".status.podCreatedTime");
  refused(with("/status/conditions/0/status"_json_pointer, "Maybe"),
          ".status.conditions[0].status");
  refused(with("/status/conditions/1/lastTransitionTime"_json_pointer, 5),
          ".status.conditions[1].lastTransitionTime");
}

TEST_CASE("share object: an object without status or serve reads as a new share to serve") {
  const json object = {
      {"metadata", {{"name", "pvc-b"}, {"resourceVersion", "12"}, {"generation", 1}}},
      {"spec", json::object()}};
  const auto record = RequireOk(RecordFromObject(object));
  CHECK(record.spec().volume() == "pvc-b");
  CHECK(record.spec().serve());
  CHECK(record.status().phase() == pb::PHASE_UNSPECIFIED);
  CHECK_FALSE(record.status().hold_record());
  CHECK_FALSE(record.deletion_requested());
}

TEST_CASE("share object: times are RFC 3339 in UTC with milliseconds, any offset read") {
  CHECK(FormatTime(1'764'637'323'004) == "2025-12-02T01:02:03.004Z");
  CHECK(RequireOk(ParseTime("2025-12-02T01:02:03.004Z")) == 1'764'637'323'004);
  CHECK(RequireOk(ParseTime("2025-12-02T02:02:03.004+01:00")) == 1'764'637'323'004);
  CHECK(RequireOk(ParseTime("2025-12-02T01:02:03Z")) == 1'764'637'323'000);
  CHECK_FALSE(ParseTime("2025-12-02 01:02:03").ok());
}

}  // namespace
}  // namespace controller::kubernetes
