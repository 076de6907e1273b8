// What an informer's handler was told, in order, each key with what the
// cache held for it at that moment ("KEY@WHAT", or "KEY deleted").
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kube/informer.h"

namespace testing_support {

class InformerRecorder {
 public:
  // `describe`: what of an object to record (its version, a data field).
  explicit InformerRecorder(std::function<std::string(const nlohmann::json&)> describe)
      : describe_(std::move(describe)) {}
  void Attach(const kube::Informer* informer) { informer_ = informer; }
  void operator()(const std::string& key) {
    const auto object = informer_->Get(key);
    absl::MutexLock lock(&mu_);
    // StrCat, not "@" + std::string: GCC 12 at -O3 warns (-Wrestrict, a
    // false positive) on that operator+.
    seen_.push_back(object ? absl::StrCat(key, "@", describe_(*object))
                           : absl::StrCat(key, " deleted"));
  }
  std::vector<std::string> seen() const {
    absl::MutexLock lock(&mu_);
    return seen_;
  }
  bool Saw(const std::string& entry) const {
    const auto all = seen();
    return std::find(all.begin(), all.end(), entry) != all.end();
  }

 private:
  const std::function<std::string(const nlohmann::json&)> describe_;
  const kube::Informer* informer_ = nullptr;
  mutable absl::Mutex mu_;
  std::vector<std::string> seen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace testing_support
