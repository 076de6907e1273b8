// Kubernetes Events on ShareManager objects, so that `kubectl describe
// sharemanager X` says what happened to the share and why: each change of
// its phase or reason the controller records (a pod replaced because it
// exited 3, and share-manager's own words for why) becomes one Event.
//
// Posting is off the reconciler's path: Record queues and returns, and a
// thread of its own posts. An apiserver that refuses or is away costs
// Events (each loss logged), never a reconcile pass. The queue is bounded;
// beyond it the oldest go first.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "kube/client.h"
#include "sharemanager/controller/v1/share_record.pb.h"

namespace controller::kubernetes {

struct ShareEvent {
  std::string share;
  std::string uid;   // of the ShareManager object; "" when unknown
  std::string type;  // Normal or Warning
  std::string reason;
  std::string message;
  int64_t unix_ms = 0;
};

// The Event a share's new status is worth: its phase as the reason
// ("Error"), its reason as the message; a Warning for ERROR.
ShareEvent EventFor(const std::string& share,
                    const sharemanager::controller::v1::ShareStatusRecord& status, int64_t unix_ms);

class ShareEvents {
 public:
  // `client` must outlive this. Events go to `namespace_name`, from
  // `instance` (this replica: its host name).
  ShareEvents(kube::Client& client, std::string namespace_name, std::string instance,
              size_t max_queued = 1000);
  // Stops: what is still queued is dropped, and said so.
  ~ShareEvents();
  ShareEvents(const ShareEvents&) = delete;
  ShareEvents& operator=(const ShareEvents&) = delete;

  void Record(ShareEvent event);
  // Posts nothing more; joins the thread. Idempotent.
  void Stop();

 private:
  void Run();
  void Post(const ShareEvent& event);

  kube::Client& client_;
  const std::string namespace_name_;
  const std::string instance_;
  const size_t max_queued_;
  absl::Mutex mu_;
  std::deque<ShareEvent> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace controller::kubernetes
