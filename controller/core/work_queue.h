// The controller's work queue: each key is processed by one worker at a
// time; a key added while it is being processed runs again afterwards;
// delayed adds for timers and gates; per-key exponential backoff for
// failures; an overall rate limit (token bucket) on how fast keys are handed out.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

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

  struct Depth {
    size_t ready = 0;    // waiting for a worker
    size_t delayed = 0;  // waiting for their time (AddAfter, backoffs)
  };
  Depth depth();

 private:
  void AddLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddAfterLocked(const std::string& key, Clock::time_point at)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool TakeTokenLocked(Clock::time_point now, Clock::duration* wait)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  WorkQueueOptions options_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::set<std::pair<Clock::time_point, std::string>> delayed_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, Clock::time_point> delayed_at_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::string> ready_ ABSL_GUARDED_BY(mu_);  // FIFO by sequence
  std::unordered_set<std::string> queued_ ABSL_GUARDED_BY(mu_);
  std::unordered_set<std::string> processing_ ABSL_GUARDED_BY(mu_);
  std::unordered_set<std::string> dirty_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, size_t> failures_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, Clock::time_point> backoff_until_ ABSL_GUARDED_BY(mu_);
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  double tokens_ ABSL_GUARDED_BY(mu_);
  Clock::time_point last_refill_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace controller
