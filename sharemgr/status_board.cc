#include "sharemgr/status_board.h"

#include <google/protobuf/util/message_differencer.h>

namespace sharemgr {

void StatusBoard::Update(const std::function<void(Status&)>& edit) {
  {
    std::lock_guard lock(mu_);
    Status next = status_;
    edit(next);
    next.set_version(status_.version());
    if (google::protobuf::util::MessageDifferencer::Equals(next, status_)) return;
    next.set_version(status_.version() + 1);
    status_ = std::move(next);
  }
  cv_.notify_all();
}

StatusBoard::Status StatusBoard::Snapshot() const {
  std::lock_guard lock(mu_);
  return status_;
}

std::optional<StatusBoard::Status> StatusBoard::WaitNewer(
    uint64_t after, std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return closed_ || status_.version() > after; });
  if (status_.version() > after) return status_;
  return std::nullopt;
}

void StatusBoard::Close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool StatusBoard::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

}  // namespace sharemgr
