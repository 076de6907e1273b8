#include "controller/cmd/controller_metrics.h"

#include <vector>

namespace controller {
namespace {

namespace v1 = sharemanager::controller::v1;
using metrics::Seconds;

// A pass against a live pod costs about a millisecond (one GetStatus round
// trip); its RPC deadline (1 s by default) bounds a frozen peer's.
const prometheus::Histogram::BucketBoundaries kPassBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};

}  // namespace

ControllerMetrics::ControllerMetrics()
    : catalogue_(std::make_shared<metrics::Catalogue>()),
      replacements_(catalogue_
                        ->AddCounter("sharemgr_controller_replacements_total",
                                     "share-manager pods replaced by a new epoch's")
                        .Add({})),
      passes_(catalogue_->AddCounter("sharemgr_controller_reconcile_passes_total",
                                     "reconcile passes by result (ok, error)")),
      pass_duration_(catalogue_
                         ->AddHistogram("sharemgr_controller_reconcile_duration_seconds",
                                        "reconcile passes' duration")
                         .Add({}, kPassBuckets)),
      store_conflicts_(catalogue_
                           ->AddCounter("sharemgr_controller_store_conflicts_total",
                                        "store writes refused for a stale resource_version")
                           .Add({})),
      rpc_errors_(catalogue_->AddCounter(
          "sharemgr_controller_rpc_errors_total",
          "failed calls to share-managers by method (GetStatus, Mount) and status code")) {
  for (const char* result : {"ok", "error"}) passes_.Add({{"result", result}});
  catalogue_->AddScraped(
      "sharemgr_controller_shares", "shares by the phase their record holds",
      prometheus::MetricType::Gauge, [this] {
        std::map<v1::Phase, int> counts;
        {
          absl::MutexLock lock(&mu_);
          for (const auto& [share, phase] : phases_) counts[phase]++;
        }
        std::vector<prometheus::ClientMetric> samples;
        const auto* phases = v1::Phase_descriptor();
        for (int i = 0; i < phases->value_count(); ++i) {
          const auto phase = static_cast<v1::Phase>(phases->value(i)->number());
          if (phase == v1::PHASE_UNSPECIFIED) continue;
          samples.push_back(metrics::GaugeSample(
              counts[phase], {{.name = "phase", .value = phases->value(i)->name()}}));
        }
        return samples;
      });
  auto queue_family = [this](const std::string& name, const std::string& help,
                             size_t WorkQueue::Depth::*field) {
    catalogue_->AddScraped(name, help, prometheus::MetricType::Gauge, [this, field] {
      // Read under mu_: SetQueueDepth({}) then returns only once no scrape
      // is still reading a controller about to go.
      absl::MutexLock lock(&mu_);
      if (!depth_) return std::vector<prometheus::ClientMetric>{};
      return std::vector{metrics::GaugeSample(static_cast<double>(depth_().*field))};
    });
  };
  catalogue_->AddScraped(
      "sharemgr_controller_api_requests_total",
      "requests sent to the Kubernetes API by method (GET, PUT, POST, PATCH, DELETE, WATCH)",
      prometheus::MetricType::Counter, [this] {
        std::map<std::string, int64_t> counts;
        {
          absl::MutexLock lock(&mu_);  // as for the depth
          if (api_requests_) counts = api_requests_();
        }
        std::vector<prometheus::ClientMetric> samples;
        for (const auto& [method, n] : counts) {
          samples.push_back(metrics::CounterSample(static_cast<double>(n),
                                                   {{.name = "method", .value = method}}));
        }
        return samples;
      });
  queue_family("sharemgr_controller_queue_depth", "shares waiting for a worker",
               &WorkQueue::Depth::ready);
  queue_family("sharemgr_controller_queue_delayed",
               "shares waiting for their time (a requeue, a backoff)", &WorkQueue::Depth::delayed);
}

ControllerHooks ControllerMetrics::Hooks() {
  return {
      .phase = [this](const std::string& share, v1::Phase phase) { OnPhase(share, phase); },
      .removed = [this](const std::string& share) { OnRemoved(share); },
      .replaced = [this] { OnReplaced(); },
      .store_conflict = [this] { OnStoreConflict(); },
      .pass = [this](std::chrono::steady_clock::duration took, bool ok) { OnPass(took, ok); },
  };
}

GrpcShareConnector::RpcErrorHook ControllerMetrics::RpcErrors() {
  return [this](const char* method, absl::StatusCode code) { OnRpcError(method, code); };
}

void ControllerMetrics::SetQueueDepth(std::function<WorkQueue::Depth()> depth) {
  absl::MutexLock lock(&mu_);
  depth_ = std::move(depth);
}

void ControllerMetrics::SetApiRequests(std::function<std::map<std::string, int64_t>()> counts) {
  absl::MutexLock lock(&mu_);
  api_requests_ = std::move(counts);
}

void ControllerMetrics::OnPhase(const std::string& share, v1::Phase phase) {
  absl::MutexLock lock(&mu_);
  phases_[share] = phase;
}

void ControllerMetrics::OnRemoved(const std::string& share) {
  absl::MutexLock lock(&mu_);
  phases_.erase(share);
}

void ControllerMetrics::OnReplaced() { replacements_.Increment(); }

void ControllerMetrics::OnStoreConflict() { store_conflicts_.Increment(); }

void ControllerMetrics::OnPass(std::chrono::steady_clock::duration took, bool ok) {
  passes_.Add({{"result", ok ? "ok" : "error"}}).Increment();
  pass_duration_.Observe(Seconds(took));
}

void ControllerMetrics::OnRpcError(const std::string& method, absl::StatusCode code) {
  rpc_errors_.Add({{"method", method}, {"code", absl::StatusCodeToString(code)}}).Increment();
}

}  // namespace controller
