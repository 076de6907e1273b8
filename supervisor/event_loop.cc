#include "supervisor/event_loop.h"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace supervisor {
namespace {

[[noreturn]] void Fatal(const char* what) {
  // epoll, eventfd and timerfd calls only fail when the process is out of
  // descriptors or memory, or on a programming error; nothing sensible can continue.
  spdlog::critical("{}: {}", what, std::strerror(errno));
  std::abort();
}

}  // namespace

EventLoop::EventLoop()
    : epoll_(epoll_create1(EPOLL_CLOEXEC)), wakeup_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!epoll_) Fatal("epoll_create1");
  if (!wakeup_) Fatal("eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // token 0 is the wakeup eventfd
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wakeup_.get(), &ev) != 0) Fatal("epoll_ctl");
}

uint64_t EventLoop::Watch(int fd, uint32_t events, Handler handler) {
  const uint64_t token = next_token_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = token;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) Fatal("epoll_ctl ADD");
  watched_.emplace(token, Watched{fd, std::make_shared<Handler>(std::move(handler))});
  return token;
}

void EventLoop::Unwatch(uint64_t token) {
  auto it = watched_.find(token);
  if (it == watched_.end()) return;
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.fd, nullptr);
  watched_.erase(it);
}

void EventLoop::Post(Task task) {
  {
    absl::MutexLock lock(&posted_mu_);
    posted_.push_back(std::move(task));
  }
  const uint64_t one = 1;
  // A full counter still wakes the loop, so a failed write loses nothing.
  [[maybe_unused]] auto n = write(wakeup_.get(), &one, sizeof(one));
}

void EventLoop::RunPosted() {
  uint64_t count;
  [[maybe_unused]] auto n = read(wakeup_.get(), &count, sizeof(count));
  std::vector<Task> tasks;
  {
    absl::MutexLock lock(&posted_mu_);
    tasks.swap(posted_);
  }
  for (auto& task : tasks) task();
}

void EventLoop::Tick() { last_tick_ns_ = base::Clock::now().time_since_epoch().count(); }

void EventLoop::Run() {
  running_ = true;
  Tick();
  epoll_event events[16];
  while (running_) {
    const int n = epoll_wait(epoll_.get(), events, 16, static_cast<int>(kHeartbeat.count()));
    Tick();
    if (n < 0) {
      if (errno == EINTR) continue;
      Fatal("epoll_wait");
    }
    for (int i = 0; i < n && running_; ++i) {
      const uint64_t token = events[i].data.u64;
      if (token == 0) {
        RunPosted();
        continue;
      }
      auto it = watched_.find(token);
      if (it == watched_.end()) continue;  // unwatched by an earlier handler
      auto handler = it->second.handler;   // keeps it alive if it unwatches itself
      (*handler)(events[i].events);
    }
  }
}

Timer::Timer(EventLoop& loop, EventLoop::Task on_fire, clockid_t clock)
    : loop_(loop),
      fd_(timerfd_create(clock, TFD_CLOEXEC | TFD_NONBLOCK)),
      on_fire_(std::move(on_fire)) {
  if (!fd_) Fatal("timerfd_create");
  token_ = loop_.Watch(fd_.get(), EPOLLIN, [this](uint32_t) {
    uint64_t expirations;
    if (read(fd_.get(), &expirations, sizeof(expirations)) == sizeof(expirations)) on_fire_();
  });
}

Timer::~Timer() { loop_.Unwatch(token_); }

void Timer::Set(base::Duration first, base::Duration period) {
  auto to_spec = [](base::Duration d) {
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(d.count() / 1000);
    ts.tv_nsec = static_cast<long>((d.count() % 1000) * 1'000'000);
    return ts;
  };
  itimerspec spec{};
  spec.it_value = to_spec(first);
  spec.it_interval = to_spec(period);
  timerfd_settime(fd_.get(), 0, &spec, nullptr);
}

void Timer::Arm(base::Duration delay) {
  // A zero it_value would disarm the timer; fire "now" as 1 ns instead.
  if (delay.count() <= 0) {
    itimerspec spec{};
    spec.it_value.tv_nsec = 1;
    timerfd_settime(fd_.get(), 0, &spec, nullptr);
    return;
  }
  Set(delay, base::Duration(0));
}

void Timer::ArmAt(base::TimePoint when) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch());
  itimerspec spec{};
  // An absolute zero would disarm the timer: a point that early is "now".
  if (ns.count() <= 0) {
    spec.it_value.tv_nsec = 1;
  } else {
    spec.it_value.tv_sec = static_cast<time_t>(ns.count() / 1'000'000'000);
    spec.it_value.tv_nsec = static_cast<long>(ns.count() % 1'000'000'000);
  }
  timerfd_settime(fd_.get(), TFD_TIMER_ABSTIME, &spec, nullptr);
}

void Timer::ArmPeriodic(base::Duration period) { Set(period, period); }

void Timer::Disarm() { Set(base::Duration(0), base::Duration(0)); }

}  // namespace supervisor
