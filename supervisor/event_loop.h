// A single-threaded epoll loop: file descriptors, timers and tasks posted from
// other threads all run on the loop thread, so supervisor state needs no locks.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "base/unique_fd.h"

namespace supervisor {

class EventLoop {
 public:
  using Handler = std::function<void(uint32_t events)>;
  using Task = std::function<void()>;
  // The loop wakes at least this often, so its heartbeat proves it is not stuck.
  static constexpr base::Duration kHeartbeat{200};

  EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Loop thread only. Returns a token for Unwatch.
  uint64_t Watch(int fd, uint32_t events, Handler handler);
  void Unwatch(uint64_t token);

  // Any thread. Tasks run on the loop thread in order.
  void Post(Task task);

  void Run();
  void Quit() { running_ = false; }

  // When the loop last woke up (base::TimePoint{} until Run() starts); read by the
  // liveness watchdog from any thread.
  base::TimePoint last_tick() const {
    return base::TimePoint(base::Clock::duration(last_tick_ns_.load()));
  }

 private:
  void RunPosted();
  void Tick();

  base::UniqueFd epoll_;
  base::UniqueFd wakeup_;
  uint64_t next_token_ = 1;
  struct Watched {
    int fd;
    std::shared_ptr<Handler> handler;
  };
  std::unordered_map<uint64_t, Watched> watched_;
  absl::Mutex posted_mu_;
  std::vector<Task> posted_ ABSL_GUARDED_BY(posted_mu_);
  bool running_ = false;
  // Nanoseconds: metrics time a child's exit from the wake-up that reported it.
  std::atomic<int64_t> last_tick_ns_{0};
};

// A timerfd on the loop: one-shot or periodic, on CLOCK_MONOTONIC unless
// given another clock (CLOCK_BOOTTIME: it also runs while suspended).
class Timer {
 public:
  Timer(EventLoop& loop, EventLoop::Task on_fire, clockid_t clock = CLOCK_MONOTONIC);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  void Arm(base::Duration delay);
  // Fires once when the timer's clock reaches `when` (at once if it has):
  // `when` is a point of that clock, e.g. base::BootClock()'s for CLOCK_BOOTTIME.
  void ArmAt(base::TimePoint when);
  void ArmPeriodic(base::Duration period);
  void Disarm();

 private:
  void Set(base::Duration first, base::Duration period);

  EventLoop& loop_;
  base::UniqueFd fd_;
  uint64_t token_;
  EventLoop::Task on_fire_;
};

}  // namespace supervisor
