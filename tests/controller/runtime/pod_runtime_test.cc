#include "controller/runtime/pod_runtime.h"

#include <doctest/doctest.h>

#include <string>

namespace controller {

TEST_CASE("PodPhaseName names Pending and Unknown, and an out-of-range phase Unknown") {
  CHECK(std::string(PodPhaseName(PodPhase::kPending)) == "Pending");
  CHECK(std::string(PodPhaseName(PodPhase::kUnknown)) == "Unknown");
  CHECK(std::string(PodPhaseName(static_cast<PodPhase>(99))) == "Unknown");
}

}  // namespace controller
