// The test fixtures a benchmark reuses (etcd cluster, daemons) assert with
// doctest. Outside a test case, while this object lives, a failed assertion
// throws AbortRun, so main's catch runs every destructor on the way (members
// killed, mounts and loop devices removed).
#pragma once

#include <doctest/doctest.h>

#include "absl/strings/str_cat.h"
#include "bench/abort_run.h"

namespace bench {

class DoctestAssertsAbort {
 public:
  DoctestAssertsAbort() {
    context_.setAsDefaultForAssertsOutOfTestCases();
    context_.setAssertHandler([](const doctest::AssertData& data) {
      throw AbortRun(absl::StrCat(data.m_file, ":", data.m_line, ": ", data.m_expr, " ",
                                  data.m_exception.c_str(), data.m_decomp.c_str()));
    });
  }
  DoctestAssertsAbort(const DoctestAssertsAbort&) = delete;
  DoctestAssertsAbort& operator=(const DoctestAssertsAbort&) = delete;

 private:
  doctest::Context context_;
};

}  // namespace bench
