// One etcd LeaseKeepAlive stream, kept open across renewals (the share-manager's
// serving lease; leader election's too), each renewal (send, read the
// answer) bounded by a deadline. A stream that breaks or does
// not answer in time is cancelled, the client told (it moves on to its next
// member) and reopened there at the next renewal. Opened with etcd's
// "hasleader" metadata, so a member cut off from its quorum ends it instead
// of leaving it silent.
//
// gRPC's asynchronous API, on a completion queue of its own, waited on by
// the caller's thread only: a deadline is a bounded wait for the queue, and a
// cancelled call's operations are drained before the call goes. Not
// thread-safe: one caller thread (the lease keeper's).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "etcd/client.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "etcd/lease_validity.h"

namespace etcd {

class LeaseKeepAliveStream {
 public:
  using Deadline = std::chrono::system_clock::time_point;

  explicit LeaseKeepAliveStream(EtcdClient& client) : client_(client) {}
  // Cancels the stream and drains the queue.
  ~LeaseKeepAliveStream();
  LeaseKeepAliveStream(const LeaseKeepAliveStream&) = delete;
  LeaseKeepAliveStream& operator=(const LeaseKeepAliveStream&) = delete;

  // One keep-alive of `lease`: etcd's answer (its TTL <= 0 when the lease is
  // gone), or an error by `deadline` (the stream is then closed, and the
  // next call opens one on the client's next member).
  absl::StatusOr<etcdserverpb::LeaseKeepAliveResponse> KeepAlive(int64_t lease, Deadline deadline);

  // Closes the stream, if open (nothing is sent).
  void Close();

 private:
  enum Tag : intptr_t { kStart = 1, kWrite, kRead, kFinish };
  // Waits for `tag` until `deadline`; false on a timeout or a failed operation.
  bool Await(Tag tag, Deadline deadline);
  // Cancels the call, waits out its pending operations and finishes it.
  void Break(const char* why);

  EtcdClient& client_;
  grpc::CompletionQueue queue_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientAsyncReaderWriter<etcdserverpb::LeaseKeepAliveRequest,
                                                etcdserverpb::LeaseKeepAliveResponse>>
      stream_;
  EtcdClient::InUse member_;  // whose stream it is (held while it lives)
  int pending_ = 0;           // operations started and not yet out of the queue
  etcdserverpb::LeaseKeepAliveResponse response_;
  grpc::Status finish_status_;
};

// One keep-alive of `lease` on `stream`, then, when etcd renewed it, a read
// of `key`, the key held with the lease: still ours (on `lease`, holding
// `value`), gone (deleted by hand: the lease itself would not notice), or
// someone else's (`other` is then its value).
absl::StatusOr<LeaseRenewal> KeepAliveHoldingKey(LeaseKeepAliveStream& stream, EtcdClient& client,
                                                 int64_t lease, const std::string& key,
                                                 const std::string& value,
                                                 LeaseKeepAliveStream::Deadline deadline);

// Gives a kept lease up: closes its keep-alive stream, then revokes `*lease`
// (its keys go with it) and sets it to 0. OK when it is 0 already.
absl::Status RevokeKeptLease(LeaseKeepAliveStream& stream, EtcdClient& client, int64_t* lease);

}  // namespace etcd
