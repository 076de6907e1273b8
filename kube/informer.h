// A collection's objects kept in memory and followed, with client-go's
// informer semantics, on one thread of its own:
//
// - it lists, fills its cache and reports every object (HasSynced after);
// - it watches from the list's resourceVersion, with bookmarks (which move
//   the point it would resume from without any change to report);
// - a watch the apiserver ends (its timeout) is opened again from the last
//   resourceVersion seen: nothing is listed again, nothing is missed;
// - when that resourceVersion is gone (410, as an answer or an ERROR event)
//   it lists again and reports every difference: objects added, changed,
//   and deleted meanwhile;
// - any other failure is retried after a backoff (jittered, doubling from
//   100 ms to 5 s), as long as it lasts; so is a watch that ends within a
//   second without an event (as client-go's "very short watch");
// - every resync period, every cached object is reported again.
//
// The handler gets an object's key ("namespace/name", or "name" for a
// cluster-scoped one) after the cache holds the change: Get(key) gives the
// object then, or nullopt when it was deleted. Calls come on the informer's
// thread, one at a time, and never after Stop returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/cancellation.h"
#include "kube/client.h"
#include "nlohmann/json.hpp"

namespace kube {

struct InformerOptions {
  std::string path;  // the collection, e.g. /api/v1/namespaces/ns/configmaps
  std::string label_selector;
  // How long the apiserver keeps each watch open (it ends it then; the
  // informer watches again from where it was).
  std::chrono::seconds watch_timeout{300};
  // Every cached object reported again this often; zero: never.
  std::chrono::seconds resync_period{0};
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{5000};
};

// Cumulative counts, for metrics.
struct InformerCounters {
  int64_t lists = 0;            // lists that succeeded
  int64_t watches = 0;          // watches opened
  int64_t relists_on_gone = 0;  // lists again because the resourceVersion was gone
  int64_t failures = 0;         // lists and watches that failed otherwise (backed off)
  int64_t events = 0;           // watch events applied (bookmarks excluded)
};

class Informer {
 public:
  using Handler = std::function<void(const std::string& key)>;

  // `client` must outlive the informer.
  Informer(Client& client, InformerOptions options, Handler handler);
  // Stops it.
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Starts the thread; once.
  void Start();
  // Ends the watch or list in flight, or the wait, and joins the thread.
  // Not from the handler (it runs on that thread).
  void Stop();

  bool HasSynced() const;
  // True once synced; false when `timeout` passed first or it was stopped.
  bool WaitForSync(absl::Duration timeout) const;

  std::optional<nlohmann::json> Get(const std::string& key) const;
  std::vector<nlohmann::json> List() const;
  InformerCounters counters() const;
  // The resourceVersion the cache is up to date with (the last list's,
  // event's or bookmark's): every change up to it is in the cache. "" before
  // the first list.
  std::string ResourceVersion() const;
  // OK while the cache is synced and its last list or watch did not fail;
  // Unavailable (why) before the first list, and from a failure until a list
  // succeeds, a watch event or bookmark comes or a watch ends cleanly. A
  // watch reopened after an outage counts at its first event (the apiserver
  // sends a bookmark about once a minute).
  absl::Status Health() const;

 private:
  using Cache = std::map<std::string, nlohmann::json>;
  enum class WatchEnd { kEnded, kGone, kFailed, kStopped };

  void Run();
  // Lists and reports what differs from the cache. False when it failed.
  bool Relist();
  WatchEnd WatchOnce();
  void Apply(const WatchEvent& event);
  // Reports every cached object when the resync period has passed.
  void MaybeResync();
  // The watch's timeout: its own, or less so that a resync is not late.
  std::chrono::seconds NextWatchTimeout() const;
  // Waits `delay`; false when stopped first.
  bool Sleep(std::chrono::milliseconds delay);
  void Notify(const std::string& key);
  std::chrono::steady_clock::time_point NextResync() const;

  Client& client_;
  const InformerOptions options_;
  const Handler handler_;
  Cancellation cancel_;

  // The informer thread's alone.
  std::string resource_version_;
  std::chrono::steady_clock::time_point last_resync_;

  mutable absl::Mutex mu_;
  Cache cache_ ABSL_GUARDED_BY(mu_);
  std::string cache_version_ ABSL_GUARDED_BY(mu_);
  bool synced_ ABSL_GUARDED_BY(mu_) = false;
  std::string failure_ ABSL_GUARDED_BY(mu_);  // since the last success; "" when none
  // Records a failed list or watch: counted, and the informer unhealthy.
  void Failed(const absl::Status& status);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  InformerCounters counters_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// The cache's key of an object: "namespace/name", or "name" without a namespace.
std::string ObjectKey(const nlohmann::json& object);

}  // namespace kube
