// Change listeners shared by the store and the pod runtimes: registered once,
// called outside any lock of the notifier so they may call back into it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace controller {

class Listeners {
 public:
  using Listener = std::function<void(const std::string& key)>;

  void Add(Listener listener) {
    absl::MutexLock lock(&mu_);
    listeners_.push_back(std::move(listener));
  }

  void Notify(const std::string& key) const {
    std::vector<Listener> listeners;
    {
      absl::MutexLock lock(&mu_);
      listeners = listeners_;
    }
    for (const auto& l : listeners) l(key);
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<Listener> listeners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace controller
