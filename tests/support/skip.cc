#include "tests/support/skip.h"

#include <atomic>
#include <iostream>

namespace testing_support {
namespace {

std::atomic<bool> skipped{false};

}  // namespace

void SkipTestCase(const std::string& why) {
  std::cerr << "SKIPPED: " << why << "\n";
  skipped = true;
}

bool Skipped() { return skipped; }

}  // namespace testing_support
