// The apiserver's answers as absl::Status: an HTTP status with the Kubernetes
// `Status` object it sends as the body (or as a watch's ERROR event), and
// libcurl's transport errors.
//
//   404            NotFound
//   409 AlreadyExists (reason) AlreadyExists
//   409 otherwise  Aborted: a stale resourceVersion or a failed UID
//                  precondition, the conflict controller::IsConflict means
//   410            OutOfRange: the resourceVersion asked for is older than
//                  the history the apiserver keeps (IsGone). No other answer
//                  maps to OutOfRange, so the code alone tells it apart; a
//                  watcher re-lists on it.
//   400, 422       InvalidArgument (422 with the fields the apiserver named)
//   401            Unauthenticated
//   403            PermissionDenied
//   429            ResourceExhausted
//   504, timeouts  DeadlineExceeded
//   other 5xx, a connection or TLS failure   Unavailable
//
// Every message starts with what was asked ("GET /api/v1/..."), then what the
// apiserver said and its HTTP status and reason.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace kube {

// `what`: the request, e.g. "PUT /api/v1/namespaces/ns/configmaps/a".
// `body`: the answer's body, a Status object when the apiserver sent one.
absl::Status ApiError(absl::string_view what, long http_status, absl::string_view body);

// A Status object (an ERROR watch event's), mapped by its `code` as above.
absl::Status StatusFromObject(absl::string_view what, const nlohmann::json& status);

// The resourceVersion asked for is gone (410): list again.
bool IsGone(const absl::Status& status);

}  // namespace kube
