// The controller's work queue: each key is processed by one worker at a
// time; a key added while it is being processed runs again afterwards;
// delayed adds for timers and gates; per-key exponential backoff for
// failures; an overall rate limit (token bucket) on how fast keys are handed out.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace controller {

struct WorkQueueOptions {
  std::chrono::milliseconds base_backoff{50};
  std::chrono::milliseconds max_backoff{30'000};
  double rate_per_second = 1000;
  double burst = 100;
};

class WorkQueue {
 public:
  using Clock = std::chrono::steady_clock;
  explicit WorkQueue(WorkQueueOptions options = {});

  void Add(const std::string& key);
  void AddAfter(const std::string& key, std::chrono::milliseconds delay);
  // After a failure: requeue after the key's next backoff.
  void AddRateLimited(const std::string& key);
  // A wake-up from a change the key's own passes may have caused (a store
  // write): while the key backs off after a failure it waits out the
  // backoff, so a failing pass that writes cannot requeue itself at once.
  void AddUnlessBackingOff(const std::string& key);
  // After a success: the key's backoff starts over.
  void Forget(const std::string& key);
  // Blocks until a key is ready (or ShutDown: nullopt).
  std::optional<std::string> Get();
  void Done(const std::string& key);
  void ShutDown();

  size_t Failures(const std::string& key);

 private:
  void AddLocked(const std::string& key);
  void AddAfterLocked(const std::string& key, Clock::time_point at);
  bool TakeTokenLocked(Clock::time_point now, Clock::duration* wait);

  WorkQueueOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::pair<Clock::time_point, std::string>> delayed_;
  std::unordered_map<std::string, Clock::time_point> delayed_at_;
  std::map<uint64_t, std::string> ready_;  // FIFO by sequence
  std::unordered_set<std::string> queued_;
  std::unordered_set<std::string> processing_;
  std::unordered_set<std::string> dirty_;
  std::unordered_map<std::string, size_t> failures_;
  std::unordered_map<std::string, Clock::time_point> backoff_until_;
  uint64_t seq_ = 0;
  double tokens_;
  Clock::time_point last_refill_;
  bool shutdown_ = false;
};

}  // namespace controller
