// LoopDevice::Create for a doctest test case: fails the test (REQUIRE) when it
// cannot. Header-only, so the benchmarks that share tests/support need no doctest.
#pragma once

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "tests/support/loop_device.h"

namespace testing_support {

inline std::unique_ptr<LoopDevice> MakeLoop(const std::string& fs,
                                            const std::string& size = "64M") {
  auto loop = LoopDevice::Create(size, fs);
  REQUIRE_MESSAGE(loop.ok(), loop.status().ToString());
  return std::move(*loop);
}

}  // namespace testing_support
