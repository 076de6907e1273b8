// A pid a test's shell script reports through a file: written whole (to a
// temp name, then renamed) so a reader never sees half a number.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <fstream>
#include <string>

#include "tests/support/wait_for.h"

namespace testing_support {

// Shell: write the pid of the last background job ($!) to `path`, atomically.
inline std::string ShellWriteLastPid(const std::string& path) {
  return "echo $! >" + path + ".new && mv " + path + ".new " + path;
}

// The pid in `path` once it appears (within `timeout`); 0 when it does not.
inline pid_t WaitPidFile(const std::string& path, std::chrono::milliseconds timeout) {
  pid_t pid = 0;
  WaitFor(
      [&] {
        std::ifstream in(path);
        return static_cast<bool>(in >> pid);
      },
      timeout);
  return pid;
}

}  // namespace testing_support
