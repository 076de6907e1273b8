// A slow, observable filesystem tool for tests: a wrapper first in PATH for
// the share-manager daemons a test starts (they inherit the environment).
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/support/wait_for.h"

namespace testing_support {

// A `name` first in PATH for the daemons this test starts: it logs each run
// ("start ARGS", and its time), fails on request (FailNext), sleeps while the
// file `slow` exists (interruptibly), logs "TERM" and exits 32 (as e2fsck does
// when interrupted) on SIGTERM, then runs the real tool at `real`. A SIGKILL
// leaves "start" without "TERM" or "run". The previous PATH comes back and the
// directory goes away, pass or fail.
class SlowTool {
 public:
  SlowTool(const std::string& name, const std::string& real) : dir_(temp_.path()) {
    const std::string script = dir_ + "/" + name;
    std::ofstream(script) << "#!/bin/sh\n"
                          << "log=" << dir_
                          << "/log\n"
                          // Trapped before "start" is logged: a test that signals
                          // once it sees "start" always finds the trap in place.
                          << "trap 'echo TERM >>\"$log\"; exit 32' TERM\n"
                          << "date +%s%N >>" << dir_ << "/starts\n"
                          << "echo \"start $*\" >>\"$log\"\n"
                          << "fail=" << dir_ << "/fail\n"
                          << "if [ -s \"$fail\" ]; then n=$(cat \"$fail\"); echo $((n - 1)) "
                          << ">\"$fail\"; [ \"$n\" -gt 0 ] && { echo \"fail $*\" >>\"$log\"; "
                          << "exit 8; }; fi\n"
                          << "while [ -e " << dir_ << "/slow ]; do sleep 0.1 & wait $!; done\n"
                          << "trap - TERM\n"
                          << "echo \"run $*\" >>\"$log\"\n"
                          << "exec " << real << " \"$@\"\n";
    REQUIRE(chmod(script.c_str(), 0755) == 0);
    old_path_ = std::getenv("PATH") ? std::getenv("PATH") : "";
    setenv("PATH", (dir_ + ":" + old_path_).c_str(), 1);
  }
  ~SlowTool() { setenv("PATH", old_path_.c_str(), 1); }
  SlowTool(const SlowTool&) = delete;
  SlowTool& operator=(const SlowTool&) = delete;

  void Slow(bool slow) const {
    if (slow) {
      std::ofstream(dir_ + "/slow") << "";
    } else {
      std::filesystem::remove(dir_ + "/slow");
    }
  }
  // The next `runs` runs log "fail ARGS" and exit 8 (an operational error)
  // without running the real tool.
  void FailNext(int runs) const { std::ofstream(dir_ + "/fail") << runs << "\n"; }
  // When each run started, in order (CLOCK_REALTIME, ns).
  std::vector<int64_t> StartTimesNs() const {
    std::ifstream in(dir_ + "/starts");
    std::vector<int64_t> out;
    for (int64_t t = 0; in >> t;) out.push_back(t);
    return out;
  }
  std::string log() const {
    std::ifstream in(dir_ + "/log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  int Count(const std::string& word) const {
    std::istringstream lines(log());
    int n = 0;
    for (std::string line; std::getline(lines, line);) n += line.rfind(word, 0) == 0 ? 1 : 0;
    return n;
  }
  // Waits until the log has `n` lines starting with `word`.
  bool WaitCount(const std::string& word, int n, std::chrono::milliseconds timeout) const {
    return WaitFor([&] { return Count(word) >= n; }, timeout);
  }

 private:
  TempDir temp_;
  const std::string dir_;
  std::string old_path_;
};

// The real e2fsck behind a SlowTool.
class SlowFsck : public SlowTool {
 public:
  SlowFsck() : SlowTool("e2fsck", "/usr/sbin/e2fsck") {}
};

}  // namespace testing_support
