#include "tests/support/leftovers.h"

#include <iostream>
#include <mutex>

namespace testing_support {
namespace {

std::mutex mu;
std::vector<std::string>& Found() {
  static std::vector<std::string> found;
  return found;
}

}  // namespace

void ReportLeftover(const std::string& what) {
  std::cerr << "LEFTOVER: " << what << "\n";
  std::lock_guard lock(mu);
  Found().push_back(what);
}

std::vector<std::string> Leftovers() {
  std::lock_guard lock(mu);
  return Found();
}

}  // namespace testing_support
