#include "controller/store/kubernetes/share_events.h"

#include <spdlog/spdlog.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "controller/store/kubernetes/share_object.h"
#include "kube/paths.h"

namespace controller::kubernetes {

namespace v1 = sharemanager::controller::v1;

ShareEvent EventFor(const std::string& share, const v1::ShareStatusRecord& status,
                    int64_t unix_ms) {
  // "REPAIRING" -> "Repairing": Kubernetes' reasons are CamelCase words.
  std::string reason = absl::AsciiStrToLower(v1::Phase_Name(status.phase()));
  if (!reason.empty()) reason[0] = absl::ascii_toupper(static_cast<unsigned char>(reason[0]));
  return {.share = share,
          .type = status.phase() == v1::ERROR ? "Warning" : "Normal",
          .reason = reason,
          .message = status.reason(),
          .unix_ms = unix_ms};
}

ShareEvents::ShareEvents(kube::Client& client, std::string namespace_name, std::string instance,
                         size_t max_queued)
    : client_(client),
      namespace_name_(std::move(namespace_name)),
      instance_(std::move(instance)),
      max_queued_(max_queued),
      thread_([this] { Run(); }) {}

ShareEvents::~ShareEvents() { Stop(); }

void ShareEvents::Record(ShareEvent event) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  if (queue_.size() >= max_queued_) {
    queue_.pop_front();
    ++dropped_;
  }
  queue_.push_back(std::move(event));
}

void ShareEvents::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  if (!queue_.empty()) spdlog::warn("{} Event(s) not posted: stopping", queue_.size());
  queue_.clear();
}

void ShareEvents::Run() {
  for (;;) {
    ShareEvent event;
    uint64_t dropped = 0;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      event = std::move(queue_.front());
      queue_.pop_front();
      dropped = dropped_;
      dropped_ = 0;
    }
    if (dropped > 0) spdlog::warn("{} Event(s) dropped: more queued than could be posted", dropped);
    Post(event);
  }
}

void ShareEvents::Post(const ShareEvent& event) {
  const std::string at = FormatTime(event.unix_ms);
  nlohmann::json involved = {{"apiVersion", absl::StrCat(kGroup, "/", kVersion)},
                             {"kind", kKind},
                             {"name", event.share},
                             {"namespace", namespace_name_}};
  if (!event.uid.empty()) involved["uid"] = event.uid;
  const nlohmann::json object = {{"apiVersion", "v1"},
                                 {"kind", "Event"},
                                 {"metadata", {{"generateName", event.share + "."}}},
                                 {"involvedObject", std::move(involved)},
                                 {"type", event.type},
                                 {"reason", event.reason},
                                 // The apiserver's bound on a message.
                                 {"message", event.message.substr(0, 1024)},
                                 {"source", {{"component", "share-controller"}}},
                                 {"reportingComponent", "share-controller"},
                                 {"reportingInstance", instance_},
                                 {"firstTimestamp", at},
                                 {"lastTimestamp", at},
                                 {"count", 1}};
  const auto posted = client_.Create(
      kube::ResourcePath({.version = "v1", .namespace_name = namespace_name_, .plural = "events"}),
      object);
  if (!posted.ok()) {
    spdlog::warn("Event {} on ShareManager {} not posted: {}", event.reason, event.share,
                 posted.status().ToString());
  }
}

}  // namespace controller::kubernetes
