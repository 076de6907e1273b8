// A program run beside a test (share-controller, `share-manager watch`): its
// output collected as it comes; stopped (SIGTERM, then SIGKILL) and reaped
// when the test ends, pass or fail.
#pragma once

#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/child_process.h"

namespace testing_support {

class ProgramProcess {
 public:
  explicit ProgramProcess(const std::vector<std::string>& argv) {
    auto child = supervisor::ChildProcess::Spawn(argv);
    REQUIRE_MESSAGE(child.ok(), child.status().ToString());
    child_.emplace(*std::move(child));
  }
  ~ProgramProcess() {
    if (!child_ || exit_) return;
    if (!Stop()) {
      child_->SignalGroup(SIGKILL);
      WaitExit(std::chrono::milliseconds(15'000));
    }
  }
  ProgramProcess(const ProgramProcess&) = delete;
  ProgramProcess& operator=(const ProgramProcess&) = delete;

  pid_t pid() const { return child_->pid(); }
  const std::string& output() const { return output_; }

  // Collects output until it contains `text` or `timeout` passes.
  bool WaitOutput(const std::string& text, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (output_.find(text) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{child_->output_fd(), POLLIN, 0};
      poll(&p, 1, 200);
      Drain();
    }
    return output_.find(text) != std::string::npos;
  }
  // The exit, once the process has exited (within `timeout`); nullopt while it runs.
  std::optional<supervisor::ChildExit> WaitExit(std::chrono::milliseconds timeout) {
    if (exit_) return exit_;
    pollfd p{child_->pidfd(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    Drain();
    auto reaped = child_->Reap();
    exit_ = reaped.ok() ? *reaped : supervisor::ChildExit{};
    return exit_;
  }
  // SIGTERM, then the exit within 15 s.
  std::optional<supervisor::ChildExit> Stop() {
    if (!exit_) child_->SignalGroup(SIGTERM);
    return WaitExit(std::chrono::milliseconds(15'000));
  }

 private:
  void Drain() {
    char buf[4096];
    ssize_t n;
    while ((n = read(child_->output_fd(), buf, sizeof(buf))) > 0) {
      output_.append(buf, static_cast<size_t>(n));
    }
  }

  std::optional<supervisor::ChildProcess> child_;
  std::optional<supervisor::ChildExit> exit_;
  std::string output_;
};

}  // namespace testing_support
