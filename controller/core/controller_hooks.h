// What the controller reports as it works, for metrics (share-controller's
// --metrics-listen; controller_metrics.h turns them into Prometheus
// families). Every hook is optional, runs on the thread that saw the event
// (a worker, mostly) and must be quick and thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "sharemanager/controller/v1/share_record.pb.h"

namespace controller {

struct ControllerHooks {
  // A pass recorded (or found already recorded) a share's phase.
  std::function<void(const std::string& share, sharemanager::controller::v1::Phase phase)> phase;
  // A pass recorded a share's new phase or reason (`status`, as written).
  std::function<void(const std::string& share,
                     const sharemanager::controller::v1::ShareStatusRecord& status)>
      transition;
  // A share's record is gone: it has no phase any more.
  std::function<void(const std::string& share)> removed;
  // A share's pod is being replaced: its record moved to a new epoch.
  std::function<void()> replaced;
  // A store write was refused for a stale resource_version (a conflict).
  std::function<void()> store_conflict;
  // A reconcile pass ended; `ok`: no error for the queue to back off on.
  std::function<void(std::chrono::steady_clock::duration took, bool ok)> pass;
};

}  // namespace controller
