// What a harness object had to clean up that should not have been there (a
// ganesha that outlived its share-manager, an export still mounted after the
// daemon exited). Found in destructors, where no test assertion can run, so
// they are collected here and the test binary's main fails the run with them.
#pragma once

#include <string>
#include <vector>

namespace testing_support {

// Any thread. Also printed to stderr at once.
void ReportLeftover(const std::string& what);
std::vector<std::string> Leftovers();

}  // namespace testing_support
