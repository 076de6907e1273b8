// doctest's main for every test binary. The supervisor takes SIGTERM, SIGINT and
// SIGCHLD through a signalfd, which needs them blocked in all threads, so
// block them before doctest (or gRPC) starts any.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <signal.h>

#include "supervisor/supervisor.h"

int main(int argc, char** argv) {
  supervisor::BlockSupervisedSignals();
  signal(SIGPIPE, SIG_IGN);
  return doctest::Context(argc, argv).run();
}
