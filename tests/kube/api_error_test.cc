// The apiserver's Status answers as absl::Status.
#include "kube/api_error.h"

#include <doctest/doctest.h>

namespace kube {
namespace {

std::string StatusBody(int code, const std::string& reason, const std::string& message) {
  return nlohmann::json{{"kind", "Status"},   {"apiVersion", "v1"}, {"status", "Failure"},
                        {"message", message}, {"reason", reason},   {"code", code}}
      .dump();
}

TEST_CASE("api errors: each HTTP status and reason maps to its code, the message kept") {
  const auto not_found = ApiError("GET /api/v1/namespaces/ns/configmaps/a", 404,
                                  StatusBody(404, "NotFound", "configmaps \"a\" not found"));
  CHECK(absl::IsNotFound(not_found));
  CHECK(not_found.message() ==
        "GET /api/v1/namespaces/ns/configmaps/a: configmaps \"a\" not found (HTTP 404, reason "
        "NotFound)");
  CHECK(absl::IsAlreadyExists(ApiError("POST x", 409, StatusBody(409, "AlreadyExists", "exists"))));
  // A stale resourceVersion and a failed UID precondition: conflicts.
  CHECK(absl::IsAborted(ApiError(
      "PUT x", 409,
      StatusBody(409, "Conflict", "the object has been modified; please apply your changes"))));
  CHECK(absl::IsAborted(ApiError(
      "DELETE x", 409, StatusBody(409, "Conflict", "Precondition failed: UID in precondition"))));
  const auto gone = ApiError("GET w", 410, StatusBody(410, "Expired", "too old resource version"));
  CHECK(IsGone(gone));
  CHECK_FALSE(IsGone(ApiError("GET w", 500, StatusBody(500, "InternalError", "boom"))));
  CHECK(absl::IsInvalidArgument(ApiError("GET x", 400, StatusBody(400, "BadRequest", "bad"))));
  CHECK(absl::IsUnauthenticated(ApiError("GET x", 401, StatusBody(401, "Unauthorized", "no"))));
  CHECK(absl::IsPermissionDenied(ApiError("GET x", 403, StatusBody(403, "Forbidden", "no"))));
  CHECK(absl::IsResourceExhausted(
      ApiError("GET x", 429, StatusBody(429, "TooManyRequests", "later"))));
  CHECK(absl::IsUnavailable(ApiError("GET x", 503, StatusBody(503, "ServiceUnavailable", "x"))));
  CHECK(absl::IsDeadlineExceeded(ApiError("GET x", 504, StatusBody(504, "Timeout", "slow"))));
}

TEST_CASE("api errors: a 422 names the fields the apiserver refused") {
  const nlohmann::json invalid = {
      {"kind", "Status"},
      {"message", "ConfigMap \"A\" is invalid"},
      {"reason", "Invalid"},
      {"code", 422},
      {"details",
       {{"causes",
         {{{"reason", "FieldValueInvalid"},
           {"message", "Invalid value: \"A\": a lowercase RFC 1123 subdomain"},
           {"field", "metadata.name"}}}}}}};
  const auto status = ApiError("POST /api/v1/namespaces/ns/configmaps", 422, invalid.dump());
  CHECK(absl::IsInvalidArgument(status));
  CHECK(status.message().find("metadata.name: Invalid value: \"A\"") != std::string::npos);
}

TEST_CASE("api errors: an answer not from the apiserver is shown as it came") {
  const auto status = ApiError("GET x", 502, "<html>Bad Gateway</html>");
  CHECK(absl::IsUnavailable(status));
  CHECK(status.message() == "GET x: HTTP 502 with body \"<html>Bad Gateway</html>\"");
  CHECK(ApiError("GET x", 500, "").message() == "GET x: HTTP 500 with no body");
}

TEST_CASE("api errors: a watch's ERROR event by its Status code") {
  const auto gone = StatusFromObject(
      "GET w", nlohmann::json::parse(StatusBody(410, "Expired", "too old resource version: 1")));
  CHECK(IsGone(gone));
  CHECK(gone.message().find("too old resource version: 1") != std::string::npos);
  CHECK(absl::IsUnavailable(
      StatusFromObject("GET w", nlohmann::json{{"kind", "Status"}, {"message", "no code"}})));
}

}  // namespace
}  // namespace kube
