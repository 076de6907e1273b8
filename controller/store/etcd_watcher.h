// Follows every change to the keys under an etcd prefix, on a thread of its
// own, without missing one: one Watch stream at a time from the revision
// after the last change seen, so a stream that breaks (its member killed, cut
// off from its leader) resumes on the next member where it stopped. When
// that history is gone (compacted), every key is reported again: the ones
// there now and the ones known before (deleted meanwhile), then the watch
// goes on from the listing's revision.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "etcd/client.h"

namespace controller {

class EtcdWatcher {
 public:
  using OnChange = std::function<void(const std::string& key)>;

  // Calls `on_change` (on the watcher's thread, in revision order) with the
  // key of every change under `prefix` from `start_revision` on; `known` are
  // the keys there just before it. `client` must outlive the watcher.
  EtcdWatcher(etcd::EtcdClient& client, std::string prefix, int64_t start_revision,
              std::set<std::string> known, OnChange on_change);
  // Ends the stream and joins the thread: no call to `on_change` after.
  ~EtcdWatcher();
  EtcdWatcher(const EtcdWatcher&) = delete;
  EtcdWatcher& operator=(const EtcdWatcher&) = delete;

  // The member the stream is open on; "" between streams. For logs and tests.
  std::string endpoint() const;

 private:
  enum class StreamEnd { kFailed, kCompacted, kStopped };
  void Run();
  // One stream on `member`, until it ends. `created`: the server accepted
  // the watch (the backoff starts over).
  StreamEnd Follow(const etcd::EtcdClient::Member& member, bool& created);
  // Waits until `member`'s channel is connected; false when it is not within
  // the calls' deadline, or the watcher is stopping.
  bool Connect(const etcd::EtcdClient::Member& member);
  void Report(const std::string& key, bool deleted);
  // Lists the prefix and reports every key (see above). False when the
  // listing failed (retried after a backoff).
  bool Relist();
  // Waits `delay` unless stopped first; false when stopped.
  bool Sleep(std::chrono::milliseconds delay);

  etcd::EtcdClient& client_;
  const std::string prefix_;
  const OnChange on_change_;
  // The watcher's thread's alone.
  int64_t next_revision_;
  std::set<std::string> known_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The open stream's, so the destructor can end it.
  grpc::ClientContext* stream_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string endpoint_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once everything above is set
};

}  // namespace controller
