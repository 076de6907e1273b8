#include "sharemgr/status_board.h"

#include <google/protobuf/util/message_differencer.h>

namespace sharemgr {

void StatusBoard::Update(const std::function<void(Status&)>& edit) {
  absl::MutexLock lock(&mu_);
  Status next = status_;
  edit(next);
  next.set_version(status_.version());
  if (google::protobuf::util::MessageDifferencer::Equals(next, status_)) return;
  next.set_version(status_.version() + 1);
  status_ = std::move(next);
}

StatusBoard::Status StatusBoard::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

std::optional<StatusBoard::Status> StatusBoard::WaitNewer(
    uint64_t after, std::chrono::steady_clock::time_point deadline) const {
  absl::MutexLock lock(&mu_);
  auto newer_or_closed = [this, after]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || status_.version() > after;
  };
  mu_.AwaitWithTimeout(absl::Condition(&newer_or_closed),
                       absl::FromChrono(deadline - std::chrono::steady_clock::now()));
  if (status_.version() > after) return status_;
  return std::nullopt;
}

void StatusBoard::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

bool StatusBoard::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

}  // namespace sharemgr
