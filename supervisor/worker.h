// Runs blocking work (a probe) on its own thread, one task at a time, and
// hands each result back on the EventLoop, so the loop never blocks. The
// destructor joins the thread: a task must end (its owner bounds it, and
// WaitIdle tells a shutdown whether one is stuck in the kernel, in which case
// the process exits without destroying it). Tasks capture only what they own.
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
  // Waits up to `budget` for a running task to end; false if it is still running.
  bool WaitIdle(base::Duration budget);
  // When the running task started (for deadlines enforced by the caller).
  base::TimePoint started() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace supervisor
