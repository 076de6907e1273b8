#include "kube/api_error.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kube/object.h"

namespace kube {
namespace {

absl::StatusCode CodeFor(long http_status, const std::string& reason) {
  switch (http_status) {
    case 400:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 409:
      return reason == "AlreadyExists" ? absl::StatusCode::kAlreadyExists
                                       : absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      break;
  }
  if (http_status >= 500) return absl::StatusCode::kUnavailable;
  // A 3xx (redirects are never followed) or another 4xx: the request is not
  // one this apiserver takes.
  return absl::StatusCode::kFailedPrecondition;
}

// "field: message" for each cause a 422 names (the fields that failed validation).
std::string Causes(const nlohmann::json& status) {
  const auto details = status.find("details");
  if (details == status.end() || !details->is_object()) return "";
  const auto causes = details->find("causes");
  if (causes == details->end() || !causes->is_array()) return "";
  std::vector<std::string> parts;
  for (const auto& cause : *causes) {
    if (!cause.is_object()) continue;
    const std::string field = StringAt(cause, {"field"});
    const std::string message = StringAt(cause, {"message"});
    parts.push_back(field.empty() ? message : absl::StrCat(field, ": ", message));
  }
  return absl::StrJoin(parts, "; ");
}

absl::Status FromStatusObject(absl::string_view what, long http_status,
                              const nlohmann::json& status) {
  const std::string reason = StringAt(status, {"reason"});
  std::string message = StringAt(status, {"message"});
  if (http_status == 422) {
    const std::string causes = Causes(status);
    if (!causes.empty()) absl::StrAppend(&message, " [", causes, "]");
  }
  return absl::Status(
      CodeFor(http_status, reason),
      absl::StrCat(what, ": ", message.empty() ? "no message" : message, " (HTTP ", http_status,
                   reason.empty() ? "" : absl::StrCat(", reason ", reason), ")"));
}

}  // namespace

absl::Status ApiError(absl::string_view what, long http_status, absl::string_view body) {
  const auto status = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (status.is_object() && StringAt(status, {"kind"}) == "Status") {
    return FromStatusObject(what, http_status, status);
  }
  // Not the apiserver's own answer (a proxy's page, a load balancer's): its
  // start is what there is to say.
  constexpr size_t kShown = 200;
  const absl::string_view shown = body.substr(0, kShown);
  return absl::Status(
      CodeFor(http_status, ""),
      absl::StrCat(what, ": HTTP ", http_status,
                   shown.empty() ? " with no body"
                                 : absl::StrCat(" with body \"", shown,
                                                body.size() > kShown ? "..." : "", "\"")));
}

absl::Status StatusFromObject(absl::string_view what, const nlohmann::json& status) {
  if (!status.is_object()) {
    return absl::UnavailableError(
        absl::StrCat(what, ": an ERROR event without a Status object: ", status.dump()));
  }
  const auto code = status.find("code");
  const long http_status = code != status.end() && code->is_number_integer()
                               ? code->get<long>()
                               : 500;  // no code: the apiserver's own failure
  return FromStatusObject(what, http_status, status);
}

bool IsGone(const absl::Status& status) { return status.code() == absl::StatusCode::kOutOfRange; }

}  // namespace kube
