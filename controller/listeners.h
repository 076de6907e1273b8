// Change listeners shared by the store and the pod runtimes: registered once,
// called outside any lock of the notifier so they may call back into it.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace controller {

class Listeners {
 public:
  using Listener = std::function<void(const std::string& key)>;

  void Add(Listener listener) {
    std::lock_guard lock(mu_);
    listeners_.push_back(std::move(listener));
  }

  void Notify(const std::string& key) const {
    std::vector<Listener> listeners;
    {
      std::lock_guard lock(mu_);
      listeners = listeners_;
    }
    for (const auto& l : listeners) l(key);
  }

 private:
  mutable std::mutex mu_;
  std::vector<Listener> listeners_;
};

}  // namespace controller
