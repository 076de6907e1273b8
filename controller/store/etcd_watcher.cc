#include "controller/store/etcd_watcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/time/time.h"
#include "base/fmt_absl.h"

namespace controller {
namespace {

// How often a wait for a connection looks whether the watcher is stopping.
constexpr std::chrono::milliseconds kStopCheck{100};

}  // namespace

EtcdWatcher::EtcdWatcher(etcd::EtcdClient& client, std::string prefix, int64_t start_revision,
                         std::set<std::string> known, OnChange on_change)
    : client_(client),
      prefix_(std::move(prefix)),
      on_change_(std::move(on_change)),
      next_revision_(start_revision),
      known_(std::move(known)),
      thread_([this] { Run(); }) {}

EtcdWatcher::~EtcdWatcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    // Valid before the stream starts too: gRPC then cancels it as it starts.
    if (stream_context_ != nullptr) stream_context_->TryCancel();
  }
  thread_.join();
}

std::string EtcdWatcher::endpoint() const {
  absl::MutexLock lock(&mu_);
  return endpoint_;
}

bool EtcdWatcher::Sleep(std::chrono::milliseconds delay) {
  absl::MutexLock lock(&mu_);
  return !mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(delay));
}

void EtcdWatcher::Run() {
  const auto& options = client_.options();
  auto backoff = options.backoff_initial;
  bool relist = false;
  while (true) {
    if (relist) relist = !Relist();
    StreamEnd end = StreamEnd::kFailed;
    bool created = false;
    if (!relist) {
      const etcd::EtcdClient::InUse in_use = client_.Current();
      end = Follow(*in_use.member, created);
      if (end == StreamEnd::kStopped) return;
      if (end == StreamEnd::kCompacted) {
        // Not the member's fault; the history is gone from every member.
        relist = true;
        continue;
      }
      client_.Failed(in_use.index);
    }
    backoff = created ? options.backoff_initial : std::min(backoff * 2, options.backoff_max);
    if (!Sleep(backoff)) return;
  }
}

bool EtcdWatcher::Connect(const etcd::EtcdClient::Member& member) {
  // A stream has no deadline: one opened on a member that never answers
  // (starting, hung) would wait for good. Connected first, within the calls'.
  const auto deadline = std::chrono::system_clock::now() + client_.options().call_timeout;
  while (std::chrono::system_clock::now() < deadline) {
    if (member.channel->WaitForConnected(
            std::min(deadline, std::chrono::system_clock::now() + kStopCheck))) {
      return true;
    }
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
  }
  return false;
}

EtcdWatcher::StreamEnd EtcdWatcher::Follow(const etcd::EtcdClient::Member& member, bool& created) {
  {
    absl::MutexLock lock(&mu_);
    endpoint_ = member.endpoint;
  }
  if (!Connect(member)) {
    absl::MutexLock lock(&mu_);
    endpoint_.clear();
    if (stopping_) return StreamEnd::kStopped;
    spdlog::warn("etcd watch of {}: cannot connect to {} (resuming at revision {})", prefix_,
                 member.endpoint, next_revision_);
    return StreamEnd::kFailed;
  }
  grpc::ClientContext context;
  context.AddMetadata(etcd::kRequireLeaderKey, etcd::kRequireLeaderValue);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return StreamEnd::kStopped;
    stream_context_ = &context;
  }
  auto stream = member.watch->Watch(&context);
  etcdserverpb::WatchRequest request;
  auto& create = *request.mutable_create_request();
  create.set_key(prefix_);
  create.set_range_end(etcd::PrefixRangeEnd(prefix_));
  create.set_start_revision(next_revision_);
  StreamEnd end = StreamEnd::kFailed;
  etcdserverpb::WatchResponse response;
  if (stream->Write(request)) {
    while (stream->Read(&response)) {
      if (response.compact_revision() > 0) {
        spdlog::warn(
            "etcd watch of {} on {}: revisions before {} are compacted (wanted {}); "
            "listing every key again",
            prefix_, member.endpoint, response.compact_revision(), next_revision_);
        end = StreamEnd::kCompacted;
        break;
      }
      if (response.canceled()) {
        spdlog::warn("etcd watch of {} on {} canceled: {}", prefix_, member.endpoint,
                     response.cancel_reason());
        break;
      }
      created = created || response.created();
      for (const auto& event : response.events()) {
        next_revision_ = event.kv().mod_revision() + 1;
        Report(event.kv().key(), event.type() == mvccpb::Event::DELETE);
      }
    }
  }
  // The server keeps the stream open after canceling its watcher: end it.
  context.TryCancel();
  const grpc::Status status = stream->Finish();
  absl::MutexLock lock(&mu_);
  stream_context_ = nullptr;
  endpoint_.clear();
  if (stopping_) return StreamEnd::kStopped;
  if (end == StreamEnd::kFailed) {
    spdlog::warn("etcd watch of {} on {} ended: {} (resuming at revision {})", prefix_,
                 member.endpoint, status.ok() ? "canceled" : status.error_message(),
                 next_revision_);
  }
  return end;
}

void EtcdWatcher::Report(const std::string& key, bool deleted) {
  if (deleted) {
    known_.erase(key);
  } else {
    known_.insert(key);
  }
  on_change_(key);
}

bool EtcdWatcher::Relist() {
  auto listing = etcd::ListPrefix(client_, prefix_, /*keys_only=*/true);
  if (!listing.ok()) {
    spdlog::warn("etcd: cannot list {} after a compaction: {}", prefix_,
                 listing.status().message());
    return false;
  }
  std::set<std::string> now;
  for (const auto& kv : listing->kvs) now.insert(kv.key());
  // Every key, and every key gone since: each may have changed unseen.
  std::set<std::string> changed = known_;
  changed.insert(now.begin(), now.end());
  known_ = std::move(now);
  next_revision_ = listing->revision + 1;
  for (const auto& key : changed) on_change_(key);
  return true;
}

}  // namespace controller
