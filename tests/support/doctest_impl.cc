// doctest's implementation, apart from its main (test_main.cc): the harness's
// helpers assert with doctest, and a benchmark that links them brings its own
// main and runs them outside any test case (bench/etcd_bench.cc).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
