#include "controller/runtime/pod_runtime.h"

#include "absl/strings/str_cat.h"

namespace controller {

const char* PodPhaseName(PodPhase phase) {
  switch (phase) {
    case PodPhase::kPending:
      return "Pending";
    case PodPhase::kRunning:
      return "Running";
    case PodPhase::kSucceeded:
      return "Succeeded";
    case PodPhase::kFailed:
      return "Failed";
    case PodPhase::kUnknown:
      return "Unknown";
  }
  return "Unknown";
}

std::string PodName(const std::string& volume, uint64_t epoch) {
  return absl::StrCat("share-manager-", volume, "-e", epoch);
}

}  // namespace controller
