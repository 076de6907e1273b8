// The value of a StatusOr or an optional for a doctest test case, failing the
// test (REQUIRE: it throws, so destructors unmount and kill what the test
// started) when there is none. A bare `*x` or `x->` on an error aborts the
// whole process instead, and leaves mounts, loop devices and daemons behind.
#pragma once

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/types.h>

#include <optional>
#include <source_location>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace testing_support {

template <typename T>
T RequireOk(absl::StatusOr<T> value, std::source_location where = std::source_location::current()) {
  if (!value.ok()) {
    ADD_FAIL_AT(where.file_name(), static_cast<int>(where.line()), value.status().ToString());
  }
  return *std::move(value);
}

template <typename T>
T RequireOk(std::optional<T> value, std::source_location where = std::source_location::current()) {
  if (!value.has_value()) {
    ADD_FAIL_AT(where.file_name(), static_cast<int>(where.line()), "no value");
  }
  return *std::move(value);
}

// kill(2) for a pid a test read from somewhere: 0 or a negative pid would
// signal the test's own process group (ctest included) or every process.
inline int KillPid(pid_t pid, int sig,
                   std::source_location where = std::source_location::current()) {
  if (pid <= 0) {
    ADD_FAIL_AT(where.file_name(), static_cast<int>(where.line()),
                ("refusing to signal pid " + std::to_string(pid)));
  }
  return kill(pid, sig);
}

}  // namespace testing_support
