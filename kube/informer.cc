#include "kube/informer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kube/api_error.h"
#include "kube/backoff.h"
#include "kube/object.h"
#include "spdlog/spdlog.h"

namespace kube {
namespace {}  // namespace

std::string ObjectKey(const nlohmann::json& object) {
  const std::string ns = MetadataString(object, "namespace");
  const std::string name = MetadataString(object, "name");
  return ns.empty() ? name : absl::StrCat(ns, "/", name);
}

Informer::Informer(Client& client, InformerOptions options, Handler handler)
    : client_(client), options_(std::move(options)), handler_(std::move(handler)) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cancel_.Cancel();
  if (thread_.joinable()) thread_.join();
}

bool Informer::HasSynced() const {
  absl::MutexLock lock(&mu_);
  return synced_;
}

bool Informer::WaitForSync(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  const auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return synced_ || stopping_; };
  mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  return synced_;
}

std::optional<nlohmann::json> Informer::Get(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  const auto it = cache_.find(key);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

std::vector<nlohmann::json> Informer::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<nlohmann::json> objects;
  objects.reserve(cache_.size());
  for (const auto& [key, object] : cache_) objects.push_back(object);
  return objects;
}

InformerCounters Informer::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

absl::Status Informer::Health() const {
  absl::MutexLock lock(&mu_);
  if (!failure_.empty()) return absl::UnavailableError(absl::StrCat(options_.path, ": ", failure_));
  if (!synced_) return absl::UnavailableError(absl::StrCat(options_.path, ": not listed yet"));
  return absl::OkStatus();
}

void Informer::Failed(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  ++counters_.failures;
  failure_ = std::string(status.message());
}

std::string Informer::ResourceVersion() const {
  absl::MutexLock lock(&mu_);
  return cache_version_;
}

void Informer::Run() {
  Backoff backoff(options_.backoff_initial, options_.backoff_max);
  bool listed = false;
  last_resync_ = std::chrono::steady_clock::now();
  while (!cancel_.cancelled()) {
    if (!listed) {
      listed = Relist();
      if (listed) {
        backoff.Reset();
      } else if (!Sleep(backoff.Next())) {
        return;
      }
      continue;
    }
    MaybeResync();
    switch (WatchOnce()) {
      case WatchEnd::kEnded:
        backoff.Reset();
        break;
      case WatchEnd::kGone: {
        absl::MutexLock lock(&mu_);
        ++counters_.relists_on_gone;
        listed = false;
        break;
      }
      case WatchEnd::kFailed:
        if (!Sleep(backoff.Next())) return;
        break;
      case WatchEnd::kStopped:
        return;
    }
  }
}

bool Informer::Relist() {
  auto list = client_.List(options_.path, options_.label_selector, &cancel_);
  if (!list.ok()) {
    if (!absl::IsCancelled(list.status())) {
      spdlog::warn("informer: {} (retried)", list.status().ToString());
      Failed(list.status());
    }
    return false;
  }
  Cache fresh;
  for (auto& item : list->items) {
    std::string key = ObjectKey(item);
    fresh.emplace(std::move(key), std::move(item));
  }
  // What differs from the cache: new keys, other resourceVersions, and the
  // keys gone (deleted while the informer was not watching).
  std::vector<std::string> changed;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, object] : fresh) {
      const auto old = cache_.find(key);
      if (old == cache_.end() || MetadataString(old->second, "resourceVersion") !=
                                     MetadataString(object, "resourceVersion")) {
        changed.push_back(key);
      }
    }
    for (const auto& [key, object] : cache_) {
      if (!fresh.contains(key)) changed.push_back(key);
    }
    cache_ = std::move(fresh);
    cache_version_ = list->resource_version;
    ++counters_.lists;
    failure_.clear();
  }
  resource_version_ = list->resource_version;
  for (const auto& key : changed) Notify(key);
  absl::MutexLock lock(&mu_);
  synced_ = true;
  return true;
}

Informer::WatchEnd Informer::WatchOnce() {
  {
    absl::MutexLock lock(&mu_);
    ++counters_.watches;
  }
  const WatchOptions watch{.resource_version = resource_version_,
                           .allow_bookmarks = true,
                           .timeout = NextWatchTimeout(),
                           .label_selector = options_.label_selector};
  const auto started = std::chrono::steady_clock::now();
  int64_t events = 0;
  const absl::Status status = client_.Watch(
      options_.path, watch,
      [&](const WatchEvent& event) {
        ++events;
        Apply(event);
      },
      cancel_);
  if (status.ok()) {
    // An apiserver (or a proxy before it) that ends every watch at once
    // would otherwise be asked again and again without a pause.
    if (events == 0 && std::chrono::steady_clock::now() - started < std::chrono::seconds(1)) {
      spdlog::warn("informer: {}: the watch ended at once, without an event (backed off)",
                   options_.path);
      Failed(absl::UnavailableError("the watch ended at once, without an event"));
      return WatchEnd::kFailed;
    }
    absl::MutexLock lock(&mu_);
    failure_.clear();
    return WatchEnd::kEnded;
  }
  if (absl::IsCancelled(status)) return WatchEnd::kStopped;
  if (IsGone(status)) {
    spdlog::info("informer: {}; listing again", status.ToString());
    return WatchEnd::kGone;
  }
  spdlog::warn("informer: {} (watched again from {})", status.ToString(), resource_version_);
  Failed(status);
  return WatchEnd::kFailed;
}

void Informer::Apply(const WatchEvent& event) {
  const std::string version = MetadataString(event.object, "resourceVersion");
  if (event.type == "BOOKMARK") {
    if (!version.empty()) {
      resource_version_ = version;
      absl::MutexLock lock(&mu_);
      cache_version_ = version;
      failure_.clear();
    }
    return;
  }
  if (event.type != "ADDED" && event.type != "MODIFIED" && event.type != "DELETED") {
    return;  // ERROR: Watch returns it
  }
  const std::string key = ObjectKey(event.object);
  {
    absl::MutexLock lock(&mu_);
    if (event.type == "DELETED") {
      cache_.erase(key);
    } else {
      cache_[key] = event.object;
    }
    if (!version.empty()) cache_version_ = version;
    ++counters_.events;
    failure_.clear();
  }
  if (!version.empty()) resource_version_ = version;
  Notify(key);
}

std::chrono::steady_clock::time_point Informer::NextResync() const {
  return last_resync_ + options_.resync_period;
}

void Informer::MaybeResync() {
  if (options_.resync_period.count() == 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < NextResync()) return;
  last_resync_ = now;
  std::vector<std::string> keys;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, object] : cache_) keys.push_back(key);
  }
  for (const auto& key : keys) Notify(key);
}

std::chrono::seconds Informer::NextWatchTimeout() const {
  if (options_.resync_period.count() == 0) return options_.watch_timeout;
  const auto left =
      std::chrono::ceil<std::chrono::seconds>(NextResync() - std::chrono::steady_clock::now());
  // At least a second: the apiserver takes whole seconds, and 0 means its default.
  return std::clamp(left, std::chrono::seconds(1), options_.watch_timeout);
}

bool Informer::Sleep(std::chrono::milliseconds delay) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(delay));
  return !stopping_;
}

void Informer::Notify(const std::string& key) {
  // Stop waits for the handler in progress (it joins this thread); the
  // handlers after it are not called.
  if (cancel_.cancelled()) return;
  handler_(key);
}

}  // namespace kube
