// RunProgram against real shell programs: a stop request and a no-kill
// timeout reach the program's whole group as one SIGTERM and wait for its
// exit; only a kill timeout uses SIGKILL.
#include "supervisor/run_program.h"

#include <doctest/doctest.h>
#include <signal.h>

#include <fstream>
#include <thread>

#include "tests/support/temp_dir.h"

namespace supervisor {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing_support::TempDir;

// Starts `sleep 30` in the background and writes its PID to `ready` once it
// runs sleep: between fork and exec the child is still the shell, and a
// SIGTERM caught there by the inherited trap is lost with the exec (the sleep
// then outlives the test).
std::string BackgroundSleep(const std::string& ready) {
  return "sleep 30 & p=$!; until [ \"$(cat /proc/$p/comm 2>/dev/null)\" = sleep ]; do :; done; "
         "echo $p > " +
         ready + ".tmp; mv " + ready + ".tmp " + ready;
}

// A shell that answers SIGTERM with "got TERM" and exit 7, after starting a
// child of its own (sleep, in its process group) whose PID it writes to
// `ready`, once the trap is in place.
std::vector<std::string> TrappingShell(const std::string& ready) {
  return {"sh", "-c", "trap 'echo got TERM; exit 7' TERM; " + BackgroundSleep(ready) + "; wait"};
}

// The PID the program wrote to `ready`, waiting for it up to 10 s.
pid_t WaitReady(const std::string& ready) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    std::ifstream in(ready);
    pid_t pid = 0;
    if (in >> pid) return pid;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return -1;
}

// Whether `pid` still runs (a zombie has died), waiting up to 2 s for it to go.
bool StillRunning(pid_t pid) {
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string pid_field, comm, state;
    const bool running = stat >> pid_field >> comm >> state && state != "Z";
    if (!running || Clock::now() >= deadline) return running;
    std::this_thread::sleep_for(milliseconds(20));
  }
}

}  // namespace

TEST_CASE("run_program: a stop request sends one SIGTERM to the group and waits for the exit") {
  TempDir dir;
  const std::string ready = dir.path() + "/ready";
  StopSignal stop;
  pid_t grandchild = -1;
  std::thread stopper([&] {
    grandchild = WaitReady(ready);
    stop.Request();
  });
  const auto result = RunProgram(
      TrappingShell(ready),
      {.timeout = std::chrono::seconds(60), .at_timeout = AtTimeout::kTerminate, .stop = &stop});
  stopper.join();
  CHECK(stop.requested());
  CHECK(result.stopped);
  CHECK_FALSE(result.timed_out);
  CHECK(result.exit_code == 7);
  CHECK(result.output.find("got TERM") != std::string::npos);
  REQUIRE(grandchild > 0);
  CHECK_FALSE(StillRunning(grandchild));
}

TEST_CASE("run_program: a program is not started once a stop was requested") {
  StopSignal stop;
  stop.Request();
  const auto result = RunProgram({"true"}, {.stop = &stop});
  CHECK(result.stopped);
  CHECK(result.exit_code == -1);
}

TEST_CASE("run_program: a no-kill timeout sends SIGTERM and waits for the program to exit") {
  TempDir dir;
  const std::string ready = dir.path() + "/ready";
  // The trap takes its time: the timeout must wait for it, never SIGKILL.
  const auto result = RunProgram(
      {"sh", "-c",
       "trap 'sleep 0.5; echo got TERM; exit 7' TERM; " + BackgroundSleep(ready) + "; wait"},
      {.timeout = milliseconds(500), .at_timeout = AtTimeout::kTerminate});
  CHECK(result.timed_out);
  CHECK_FALSE(result.stopped);
  CHECK(result.exit_code == 7);
  CHECK(result.output.find("got TERM") != std::string::npos);
  CHECK(result.elapsed >= milliseconds(1000));
  const pid_t grandchild = WaitReady(ready);
  REQUIRE(grandchild > 0);
  CHECK_FALSE(StillRunning(grandchild));
}

TEST_CASE("run_program: a kill timeout SIGKILLs the group") {
  TempDir dir;
  const std::string ready = dir.path() + "/ready";
  const auto result = RunProgram(TrappingShell(ready),
                                 {.timeout = milliseconds(500), .at_timeout = AtTimeout::kKill});
  CHECK(result.timed_out);
  CHECK(result.exit_code == 128 + SIGKILL);
  CHECK(result.output.find("got TERM") == std::string::npos);
  const pid_t grandchild = WaitReady(ready);
  REQUIRE(grandchild > 0);
  CHECK_FALSE(StillRunning(grandchild));
}

}  // namespace supervisor
