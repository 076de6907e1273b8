// A test case that cannot run on this machine (it lacks a capability the
// case is about) says so instead of passing: the test binary then exits with
// kSkipExitCode, which ctest reports as "Skipped" (SKIP_RETURN_CODE).
#pragma once

#include <string>

namespace testing_support {

inline constexpr int kSkipExitCode = 77;

// Prints why and marks the run skipped; the caller returns from the test case.
void SkipTestCase(const std::string& why);
bool Skipped();

}  // namespace testing_support
