// doctest's main for every test binary. The supervisor takes SIGTERM, SIGINT and
// SIGCHLD through a signalfd, which needs them blocked in all threads, so
// block them before doctest (or gRPC) starts any. doctest itself is
// implemented in doctest_impl.cc.
#include <doctest/doctest.h>
#include <signal.h>

#include <atomic>
#include <iostream>

#include "supervisor/supervisor.h"
#include "tests/support/leftovers.h"
#include "tests/support/skip.h"

namespace {

std::atomic<int> test_cases_run{0};

// Counts the test cases that ran. ctest runs one case per entry through a
// name filter; a filter that matches nothing (a name ctest split at a ';')
// would otherwise pass without running anything.
struct RunCounter : doctest::IReporter {
  explicit RunCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { ++test_cases_run; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("run-counter", 1, RunCounter);

}  // namespace

int main(int argc, char** argv) {
  supervisor::BlockSupervisedSignals();
  signal(SIGPIPE, SIG_IGN);
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit()) return result;  // --list-test-cases and the like
  if (test_cases_run == 0) {
    std::cerr << "no test case matched the filters: nothing ran\n";
    return 1;
  }
  // Found by harness destructors, where no assertion can fail the test.
  if (const auto leftovers = testing_support::Leftovers(); !leftovers.empty()) {
    std::cerr << leftovers.size() << " leftover(s) had to be cleaned up: failing the run\n";
    return 1;
  }
  if (result == 0 && testing_support::Skipped()) return testing_support::kSkipExitCode;
  return result;
}
