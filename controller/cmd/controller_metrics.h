// share-controller's Prometheus metrics (--metrics-listen; README
// "Metrics"): shares by phase, replacements, reconcile passes and their
// duration, the work queue's depth, store conflicts, and failed calls to
// share-managers by code. The controller library reports through
// ControllerHooks and the connector's error hook, which this binds; the
// library itself has no Prometheus dependency. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "controller/core/controller_hooks.h"
#include "controller/core/work_queue.h"
#include "controller/runtime/grpc_share_connector.h"
#include "metrics/catalogue.h"

namespace controller {

class ControllerMetrics {
 public:
  ControllerMetrics();
  ControllerMetrics(const ControllerMetrics&) = delete;
  ControllerMetrics& operator=(const ControllerMetrics&) = delete;

  // What a metrics::Endpoint serves (stop it before this goes).
  std::shared_ptr<metrics::Catalogue> catalogue() const { return catalogue_; }

  // Bound to the On* calls below.
  ControllerHooks Hooks();
  GrpcShareConnector::RpcErrorHook RpcErrors();
  // Where the queue's depth is read at scrape time (a Controller's
  // QueueDepth). Until then, and after SetQueueDepth({}), no samples: reset
  // it before the controller goes (it returns once no scrape reads it).
  void SetQueueDepth(std::function<WorkQueue::Depth()> depth);
  // Where the Kubernetes API requests sent so far are read, by method, at
  // scrape time (kube::Client::RequestCounts; it must outlive the endpoint).
  void SetApiRequests(std::function<std::map<std::string, int64_t>()> counts);

  void OnPhase(const std::string& share, sharemanager::controller::v1::Phase phase);
  void OnRemoved(const std::string& share);
  void OnReplaced();
  void OnStoreConflict();
  void OnPass(std::chrono::steady_clock::duration took, bool ok);
  void OnRpcError(const std::string& method, absl::StatusCode code);

 private:
  std::shared_ptr<metrics::Catalogue> catalogue_;
  prometheus::Counter& replacements_;
  prometheus::Family<prometheus::Counter>& passes_;
  prometheus::Histogram& pass_duration_;
  prometheus::Counter& store_conflicts_;
  prometheus::Family<prometheus::Counter>& rpc_errors_;

  mutable absl::Mutex mu_;
  std::map<std::string, sharemanager::controller::v1::Phase> phases_ ABSL_GUARDED_BY(mu_);
  std::function<WorkQueue::Depth()> depth_ ABSL_GUARDED_BY(mu_);
  std::function<std::map<std::string, int64_t>()> api_requests_ ABSL_GUARDED_BY(mu_);
};

}  // namespace controller
