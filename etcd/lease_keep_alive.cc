#include "etcd/lease_keep_alive.h"

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

namespace etcd {
namespace {

void* TagOf(intptr_t tag) { return reinterpret_cast<void*>(tag); }

}  // namespace

LeaseKeepAliveStream::~LeaseKeepAliveStream() {
  Close();
  queue_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue_.Next(&tag, &ok)) {
  }
}

void LeaseKeepAliveStream::Close() {
  if (stream_) Break(nullptr);
}

bool LeaseKeepAliveStream::Await(Tag want, Deadline deadline) {
  for (;;) {
    void* tag = nullptr;
    bool ok = false;
    const auto got = queue_.AsyncNext(&tag, &ok, deadline);
    if (got != grpc::CompletionQueue::GOT_EVENT) return false;  // the deadline (or shut down)
    --pending_;
    // Operations run one at a time, so this is the one awaited (a stale one
    // is drained by Break before the next starts).
    if (reinterpret_cast<intptr_t>(tag) == want) return ok;
  }
}

void LeaseKeepAliveStream::Break(const char* why) {
  context_->TryCancel();
  // Cancelled, every pending operation completes promptly (failed).
  void* tag = nullptr;
  bool ok = false;
  while (pending_ > 0 && queue_.Next(&tag, &ok)) --pending_;
  stream_->Finish(&finish_status_, TagOf(kFinish));
  ++pending_;
  while (pending_ > 0 && queue_.Next(&tag, &ok)) --pending_;
  stream_.reset();
  context_.reset();
  if (why != nullptr) {
    // The member may be down, frozen or cut off from its quorum: the next
    // stream goes to the next one.
    spdlog::warn("etcd LeaseKeepAlive stream on {} {}", member_.member->endpoint, why);
    client_.Failed(member_.index);
  }
}

absl::StatusOr<etcdserverpb::LeaseKeepAliveResponse> LeaseKeepAliveStream::KeepAlive(
    int64_t lease, Deadline deadline) {
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  // A stream left open since the last renewal may have broken meanwhile (its
  // member restarted): then once more, at once, on a new one.
  for (int attempt = 0;; ++attempt) {
    const bool fresh = !stream_;
    if (fresh) {
      member_ = client_.Current();
      // As the client asks: a stream opened on a channel that is not
      // connected may fail at once, so wait for the connection first.
      if (!member_.member->channel->WaitForConnected(deadline)) {
        client_.Failed(member_.index);
        return absl::UnavailableError(absl::StrCat("etcd LeaseKeepAlive: no connection to ",
                                                   member_.member->endpoint, " in time"));
      }
      context_ = std::make_unique<grpc::ClientContext>();
      context_->AddMetadata(kRequireLeaderKey, kRequireLeaderValue);
      stream_ = member_.member->lease->PrepareAsyncLeaseKeepAlive(context_.get(), &queue_);
      stream_->StartCall(TagOf(kStart));
      ++pending_;
    }
    const char* step = "opening";
    bool done = !fresh || Await(kStart, deadline);
    if (done) {
      step = "sending";
      stream_->Write(request, TagOf(kWrite));
      ++pending_;
      done = Await(kWrite, deadline);
    }
    if (done) {
      step = "reading";
      stream_->Read(&response_, TagOf(kRead));
      ++pending_;
      done = Await(kRead, deadline);
    }
    if (done) return response_;
    const std::string endpoint = member_.member->endpoint;
    const bool timed_out = std::chrono::system_clock::now() >= deadline;
    Break(timed_out ? "did not answer in time" : "broke");
    if (timed_out) {
      return absl::DeadlineExceededError(
          absl::StrCat("etcd LeaseKeepAlive on ", endpoint, ": no answer in time (", step, ")"));
    }
    if (fresh || attempt > 0) {
      return absl::UnavailableError(absl::StrCat("etcd LeaseKeepAlive on ", endpoint, ": ", step,
                                                 ": ", finish_status_.error_message()));
    }
  }
}

absl::StatusOr<LeaseRenewal> KeepAliveHoldingKey(LeaseKeepAliveStream& stream, EtcdClient& client,
                                                 int64_t lease, const std::string& key,
                                                 const std::string& value,
                                                 LeaseKeepAliveStream::Deadline deadline) {
  auto kept = stream.KeepAlive(lease, deadline);
  if (!kept.ok()) return kept.status();
  LeaseRenewal renewal{.ttl_seconds = kept->ttl()};
  if (renewal.ttl_seconds <= 0) return renewal;
  etcdserverpb::RangeRequest get;
  get.set_key(key);
  auto now = client.Range(get);
  if (!now.ok()) return now.status();
  if (now->kvs().empty()) {
    renewal.key = LeaseRenewal::Key::kGone;
  } else if (const auto& kv = now->kvs(0); kv.lease() != lease || kv.value() != value) {
    renewal.key = LeaseRenewal::Key::kOther;
    renewal.other = kv.value();
  }
  return renewal;
}

absl::Status RevokeKeptLease(LeaseKeepAliveStream& stream, EtcdClient& client, int64_t* lease) {
  stream.Close();
  if (*lease == 0) return absl::OkStatus();
  etcdserverpb::LeaseRevokeRequest revoke;
  revoke.set_id(*lease);
  auto revoked = client.LeaseRevoke(revoke);
  if (!revoked.ok()) return revoked.status();
  *lease = 0;
  return absl::OkStatus();
}

}  // namespace etcd
