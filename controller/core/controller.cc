#include "controller/core/controller.h"

#include <spdlog/spdlog.h>

#include "base/fmt_absl.h"

namespace controller {

namespace {
const SteadyMonotonicClock kSteadyClock;
}  // namespace

Controller::Controller(Store& store, PodRuntime& runtime, ShareConnector& connector,
                       const WallClock& wall, const MonotonicClock& mono, ControllerOptions options)
    : store_(store),
      runtime_(runtime),
      options_(options),
      reconciler_(store, runtime, connector, wall, mono, options.reconciler, options.hooks),
      queue_(std::make_shared<WorkQueue>(options.queue)) {}

Controller::Controller(Store& store, PodRuntime& runtime, ShareConnector& connector,
                       const WallClock& wall, ControllerOptions options)
    : Controller(store, runtime, connector, wall, kSteadyClock, options) {}

Controller::~Controller() { Stop(); }

absl::Status Controller::Start() {
  // The store and the runtime may outlive this controller and keep notifying
  // (a runtime's shutdown deletes its pods): their listeners hold the queue
  // weakly, so a late notification finds it gone instead of freed memory.
  std::weak_ptr<WorkQueue> queue = queue_;
  // Store changes include the passes' own writes: they must not cut a
  // failing share's backoff short. Pod changes come from outside and do.
  store_.Watch([queue](const std::string& name) {
    if (auto q = queue.lock()) q->AddUnlessBackingOff(name);
  });
  runtime_.Watch([queue](const std::string& name) {
    if (auto q = queue.lock()) q->Add(name);
  });
  auto shares = store_.List();
  if (!shares.ok()) return shares.status();
  for (const auto& share : *shares) queue_->Add(share.name());
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Work(); });
  started_ = true;
  return absl::OkStatus();
}

void Controller::Stop() {
  if (!started_) return;
  started_ = false;
  queue_->ShutDown();
  for (auto& w : workers_) w.join();
  workers_.clear();
  absl::MutexLock lock(&watches_mu_);
  watches_.clear();
}

void Controller::Work() {
  while (auto name = queue_->Get()) {
    const auto started = std::chrono::steady_clock::now();
    const PassResult result = reconciler_.Reconcile(*name);
    if (options_.hooks.pass) {
      options_.hooks.pass(std::chrono::steady_clock::now() - started, result.error.ok());
    }
    if (!result.error.ok()) {
      spdlog::warn("share {}: {} (retrying with backoff)", *name, result.error.message());
      queue_->AddRateLimited(*name);
    } else {
      // A call still waiting out its retry backoff keeps the key's backoff.
      if (!result.backing_off) queue_->Forget(*name);
      if (result.requeue_after_ms) {
        queue_->AddAfter(*name, std::chrono::milliseconds(*result.requeue_after_ms));
      }
    }
    if (options_.watch_health) FollowHealth(*name);
    queue_->Done(*name);
  }
}

// Keeps one StatusWatch on the share's current endpoint.
void Controller::FollowHealth(const std::string& name) {
  auto record = store_.Get(name);
  const std::string endpoint = record.ok() ? record->status().endpoint() : "";
  std::unique_ptr<StatusWatch> old;
  {
    absl::MutexLock lock(&watches_mu_);
    auto& [watched, watch] = watches_[name];
    if (watched == endpoint) return;
    old = std::move(watch);
    watched = endpoint;
    if (!endpoint.empty()) {
      watch = std::make_unique<StatusWatch>(
          endpoint, [this, name](const StatusWatch::Event&) { queue_->Add(name); },
          options_.watch_security);
    }
  }
  // Destroyed outside the lock: it joins its thread.
}

}  // namespace controller
