// Runs blocking work (a probe, a mount, an fsck) on its own thread, one task
// at a time, and hands each result back on the EventLoop, so the loop never
// blocks. A task stuck in the kernel cannot stall shutdown: the destructor
// leaves such a thread behind (detached) instead of joining it.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "supervisor/event_loop.h"

namespace supervisor {

class Worker {
 public:
  using Task = std::function<absl::Status()>;
  using Done = std::function<void(absl::Status)>;

  explicit Worker(EventLoop& loop);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Starts `task` unless one is running (then returns false). `done` runs on
  // the loop thread with the task's result, unless the Worker is gone by then.
  bool TryRun(Task task, Done done);
  bool busy() const;
  // When the running task started (for deadlines enforced by the caller).
  base::TimePoint started() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace supervisor
