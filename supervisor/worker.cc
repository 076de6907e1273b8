#include "supervisor/worker.h"

#include <condition_variable>
#include <mutex>
#include <thread>

namespace supervisor {

// Shared with the thread and the loop tasks it posts, which may run after the
// Worker is gone (they then do nothing).
struct Worker::State {
  EventLoop* loop;
  std::mutex mu;
  std::condition_variable cv;
  Task task;
  Done done;
  bool busy = false;
  bool quit = false;
  base::TimePoint started{};
  std::thread thread;
};

Worker::Worker(EventLoop& loop) : state_(std::make_shared<State>()) {
  state_->loop = &loop;
  state_->thread = std::thread([state = state_] {
    std::unique_lock lock(state->mu);
    for (;;) {
      state->cv.wait(lock, [&] { return state->quit || state->task; });
      if (state->quit) return;
      Task task = std::move(state->task);
      Done done = std::move(state->done);
      state->task = nullptr;
      lock.unlock();
      absl::Status result = task();
      lock.lock();
      state->busy = false;
      state->cv.notify_all();  // a destructor may be waiting for this task
      if (state->quit) return;
      state->loop->Post([state, done = std::move(done), result = std::move(result)] {
        // The Worker may be gone by the time the loop runs this.
        if (!state->quit) done(result);
      });
    }
  });
}

Worker::~Worker() {
  {
    std::lock_guard lock(state_->mu);
    state_->quit = true;
  }
  state_->cv.notify_all();
  state_->thread.join();
}

bool Worker::WaitIdle(base::Duration budget) {
  std::unique_lock lock(state_->mu);
  return state_->cv.wait_for(lock, budget, [&] { return !state_->busy; });
}

bool Worker::TryRun(Task task, Done done) {
  {
    std::lock_guard lock(state_->mu);
    if (state_->busy) return false;
    state_->busy = true;
    state_->started = base::Clock::now();
    state_->task = std::move(task);
    state_->done = std::move(done);
  }
  state_->cv.notify_all();
  return true;
}

bool Worker::busy() const {
  std::lock_guard lock(state_->mu);
  return state_->busy;
}

base::TimePoint Worker::started() const {
  std::lock_guard lock(state_->mu);
  return state_->started;
}

}  // namespace supervisor
