// Runs a program to completion with a time limit, capturing its output: for
// the short helpers share-manager calls (mkfs, e2fsck, resize2fs, ...) and
// for tests. A program still running at the limit is killed with its group.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace supervisor {

struct ProgramResult {
  // Exit code, 128+signal when killed, -1 when it could not be started.
  int exit_code = -1;
  bool timed_out = false;
  std::string output;  // stdout and stderr, interleaved
  std::chrono::milliseconds elapsed{0};
};

ProgramResult RunProgram(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

}  // namespace supervisor
