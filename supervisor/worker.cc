#include "supervisor/worker.h"

#include <condition_variable>
#include <mutex>
#include <thread>

namespace supervisor {

// Shared with the thread, so a detached thread stuck in a task stays valid.
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
  bool stuck;
  {
    std::unique_lock lock(state_->mu);
    // A task about to finish is waited for (it may use its owner's members);
    // only one stuck longer than this is left behind.
    state_->cv.wait_for(lock, std::chrono::seconds(2), [&] { return !state_->busy; });
    state_->quit = true;
    stuck = state_->busy;
  }
  state_->cv.notify_all();
  if (stuck) {
    state_->thread.detach();
  } else {
    state_->thread.join();
  }
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
