#include "controller/core/work_queue.h"

#include <algorithm>

namespace controller {

WorkQueue::WorkQueue(WorkQueueOptions options)
    : options_(options), tokens_(options.burst), last_refill_(Clock::now()) {}

void WorkQueue::AddLocked(const std::string& key) {
  if (processing_.contains(key)) {
    dirty_.insert(key);  // run again once the current pass is done
    return;
  }
  if (queued_.insert(key).second) ready_.emplace(seq_++, key);
}

void WorkQueue::Add(const std::string& key) {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    AddLocked(key);
  }
  cv_.Signal();
}

void WorkQueue::AddAfterLocked(const std::string& key, Clock::time_point at) {
  auto it = delayed_at_.find(key);
  if (it != delayed_at_.end()) {
    if (it->second <= at) return;  // an earlier wake-up is already planned
    delayed_.erase({it->second, key});
  }
  delayed_at_[key] = at;
  delayed_.insert({at, key});
}

void WorkQueue::AddAfter(const std::string& key, std::chrono::milliseconds delay) {
  if (delay.count() <= 0) return Add(key);
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    AddAfterLocked(key, Clock::now() + delay);
  }
  cv_.Signal();
}

void WorkQueue::AddRateLimited(const std::string& key) {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    const size_t failures = failures_[key]++;
    auto delay = options_.base_backoff;
    for (size_t i = 0; i < failures && delay < options_.max_backoff; ++i) delay *= 2;
    const auto at = Clock::now() + std::min(delay, options_.max_backoff);
    backoff_until_[key] = at;
    AddAfterLocked(key, at);
  }
  cv_.Signal();
}

void WorkQueue::AddUnlessBackingOff(const std::string& key) {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    auto it = backoff_until_.find(key);
    if (it != backoff_until_.end() && it->second > Clock::now()) {
      AddAfterLocked(key, it->second);  // already planned, unless a pass took it
    } else {
      AddLocked(key);
    }
  }
  cv_.Signal();
}

void WorkQueue::Forget(const std::string& key) {
  absl::MutexLock lock(&mu_);
  failures_.erase(key);
  backoff_until_.erase(key);
}

size_t WorkQueue::Failures(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

bool WorkQueue::TakeTokenLocked(Clock::time_point now, Clock::duration* wait) {
  const double elapsed = std::chrono::duration<double>(now - last_refill_).count();
  tokens_ = std::min(options_.burst, tokens_ + elapsed * options_.rate_per_second);
  last_refill_ = now;
  if (tokens_ >= 1) {
    tokens_ -= 1;
    return true;
  }
  *wait = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>((1 - tokens_) / options_.rate_per_second));
  return false;
}

std::optional<std::string> WorkQueue::Get() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (shutdown_) return std::nullopt;
    const auto now = Clock::now();
    while (!delayed_.empty() && delayed_.begin()->first <= now) {
      const std::string key = delayed_.begin()->second;
      delayed_.erase(delayed_.begin());
      delayed_at_.erase(key);
      AddLocked(key);
    }
    Clock::duration wait = std::chrono::hours(1);
    if (!delayed_.empty()) wait = delayed_.begin()->first - now;
    if (!ready_.empty()) {
      Clock::duration token_wait{};
      if (TakeTokenLocked(now, &token_wait)) {
        std::string key = ready_.begin()->second;
        ready_.erase(ready_.begin());
        queued_.erase(key);
        processing_.insert(key);
        return key;
      }
      wait = std::min(wait, token_wait);
    }
    cv_.WaitWithTimeout(&mu_, absl::FromChrono(wait));
  }
}

void WorkQueue::Done(const std::string& key) {
  {
    absl::MutexLock lock(&mu_);
    processing_.erase(key);
    if (dirty_.erase(key) > 0) AddLocked(key);
  }
  cv_.Signal();
}

void WorkQueue::ShutDown() {
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
  }
  cv_.SignalAll();
}

WorkQueue::Depth WorkQueue::depth() {
  absl::MutexLock lock(&mu_);
  return {.ready = ready_.size(), .delayed = delayed_.size()};
}

}  // namespace controller
