#include "supervisor/worker.h"

#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace supervisor {

// Shared with the thread and the loop tasks it posts, which may run after the
// Worker is gone (they then do nothing).
struct Worker::State {
  EventLoop* loop;
  absl::Mutex mu;
  Task task ABSL_GUARDED_BY(mu);
  Done done ABSL_GUARDED_BY(mu);
  bool busy ABSL_GUARDED_BY(mu) = false;
  bool quit ABSL_GUARDED_BY(mu) = false;
  base::TimePoint started ABSL_GUARDED_BY(mu){};
  std::thread thread;
};

Worker::Worker(EventLoop& loop) : state_(std::make_shared<State>()) {
  state_->loop = &loop;
  state_->thread = std::thread([state = state_] {
    absl::MutexLock lock(&state->mu);
    for (;;) {
      state->mu.Await(absl::Condition(
          +[](State* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return s->quit || s->task; },
          state.get()));
      if (state->quit) return;
      Task task = std::move(state->task);
      Done done = std::move(state->done);
      state->task = nullptr;
      state->mu.Unlock();
      absl::Status result = task();
      state->mu.Lock();
      state->busy = false;  // a destructor may be waiting for this task
      if (state->quit) return;
      state->loop->Post([state, done = std::move(done), result = std::move(result)] {
        // The Worker may be gone by the time the loop runs this.
        bool quit = false;
        {
          absl::MutexLock quit_lock(&state->mu);
          quit = state->quit;
        }
        if (!quit) done(result);
      });
    }
  });
}

Worker::~Worker() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->quit = true;
  }
  state_->thread.join();
}

bool Worker::WaitIdle(base::Duration budget) {
  absl::MutexLock lock(&state_->mu);
  return state_->mu.AwaitWithTimeout(
      absl::Condition(
          +[](State* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) { return !s->busy; }, state_.get()),
      absl::FromChrono(budget));
}

bool Worker::TryRun(Task task, Done done) {
  absl::MutexLock lock(&state_->mu);
  if (state_->busy) return false;
  state_->busy = true;
  state_->started = base::Clock::now();
  state_->task = std::move(task);
  state_->done = std::move(done);
  return true;
}

bool Worker::busy() const {
  absl::MutexLock lock(&state_->mu);
  return state_->busy;
}

base::TimePoint Worker::started() const {
  absl::MutexLock lock(&state_->mu);
  return state_->started;
}

}  // namespace supervisor
