// A share record as a ShareManager object of the Kubernetes API
// (deploy/base/crd.yaml), and back. The record's fields map one to one:
//   name                     metadata.name (also the volume's name)
//   resource_version         metadata.resourceVersion
//   spec_generation          metadata.generation (moves with the spec only)
//   deletion_requested       metadata.deletionTimestamp is set
//   status.hold_record       metadata.finalizers holds kFinalizer
//   spec, status             spec, status (camelCase; times as RFC 3339 in ms)
// so that a record written and read back is the same record: the reconciler
// compares what it read with what it computed, and any difference is a write.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "controller/store/store.h"
#include "nlohmann/json.hpp"

namespace controller::kubernetes {

inline constexpr char kGroup[] = "share-manager.io";
inline constexpr char kVersion[] = "v1alpha1";
inline constexpr char kKind[] = "ShareManager";
inline constexpr char kResource[] = "sharemanagers";
// Held while a pod of the share may exist (status.hold_record).
inline constexpr char kFinalizer[] = "share-manager.io/pods-gone";

// The record `object` holds. InvalidArgument naming the field (".spec.serve")
// when it cannot be one.
absl::StatusOr<ShareRecord> RecordFromObject(const nlohmann::json& object);

// A new object for `record` in `ns` (to create).
nlohmann::json NewObject(const ShareRecord& record, const std::string& ns);

// `object` as last read, carrying `record`'s spec, finalizer and
// resourceVersion: what to write to the object itself. Whatever else it holds
// (labels, annotations, others' finalizers) stays as it was.
nlohmann::json WithSpec(nlohmann::json object, const ShareRecord& record);

// `object` as last read, carrying `record`'s status and resourceVersion: what
// to write to its status subresource.
nlohmann::json WithStatus(nlohmann::json object, const ShareRecord& record);

// Unix ms as RFC 3339 in UTC with milliseconds ("2026-12-02T01:02:03.004Z"),
// and back (any RFC 3339 offset; sub-millisecond digits are dropped).
std::string FormatTime(int64_t unix_ms);
absl::StatusOr<int64_t> ParseTime(const std::string& text);

}  // namespace controller::kubernetes
