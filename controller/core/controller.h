// The controller loop: workers take share names from a WorkQueue and run
// reconcile passes; the queue is fed by store changes, pod changes, health
// watch events (a StatusWatch per serving pod) and the passes' own requeue
// timers. A share is named after its volume.
#pragma once

#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "controller/core/controller_hooks.h"
#include "controller/core/reconciler.h"
#include "controller/core/work_queue.h"
#include "controller/share_client.h"

namespace controller {

struct ControllerOptions {
  int workers = 4;
  ReconcilerOptions reconciler;
  WorkQueueOptions queue;
  // Follow each pod's WatchStatus so changes trigger a pass at once.
  bool watch_health = true;
  // How those watches connect (plaintext or mTLS, as the connector does).
  base::ClientSecurity watch_security;
  // For metrics (each optional).
  ControllerHooks hooks;
};

class Controller {
 public:
  // Durations are measured on `mono`; `wall` only stamps the record.
  Controller(Store& store, PodRuntime& runtime, ShareConnector& connector, const WallClock& wall,
             const MonotonicClock& mono, ControllerOptions options = {});
  // Durations on the steady clock.
  Controller(Store& store, PodRuntime& runtime, ShareConnector& connector, const WallClock& wall,
             ControllerOptions options = {});
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Enqueues every share and starts the workers.
  absl::Status Start();
  void Stop();
  // Shares waiting for a worker, and waiting for a timer (a requeue, a
  // backoff). Any thread.
  WorkQueue::Depth QueueDepth() const { return queue_->depth(); }

 private:
  void Work();
  void FollowHealth(const std::string& name);

  Store& store_;
  PodRuntime& runtime_;
  ControllerOptions options_;
  Reconciler reconciler_;
  // Shared only with the store's and runtime's listeners, weakly (see Start).
  std::shared_ptr<WorkQueue> queue_;
  std::vector<std::thread> workers_;
  absl::Mutex watches_mu_;
  // share -> (endpoint, watch)
  std::map<std::string, std::pair<std::string, std::unique_ptr<StatusWatch>>> watches_
      ABSL_GUARDED_BY(watches_mu_);
  bool started_ = false;
};

}  // namespace controller
