#include "sharemgr/termination_message.h"

#include <fcntl.h>
#include <unistd.h>

namespace sharemgr {

namespace {
// kubelet reads at most this much of the file.
constexpr size_t kMaxTerminationMessage = 4096;
}  // namespace

std::string LastErrorSink::last_error() {
  std::lock_guard lock(mutex_);
  return last_;
}

void LastErrorSink::Pin() {
  std::lock_guard lock(mutex_);
  pinned_ = true;
}

void LastErrorSink::sink_it_(const spdlog::details::log_msg& msg) {
  if (msg.level < spdlog::level::err || pinned_) return;
  last_.assign(msg.payload.data(), msg.payload.size());
}

const std::shared_ptr<LastErrorSink>& ProcessLastErrorSink() {
  static const auto* const sink =
      new std::shared_ptr<LastErrorSink>(std::make_shared<LastErrorSink>());
  return *sink;
}

void WriteTerminationMessage(std::string_view message, std::string_view path) {
  if (message.empty()) return;
  // O_TRUNC without O_CREAT: never makes the file where kubelet did not.
  const int fd = open(std::string(path).c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return;
  const std::string_view text = message.substr(0, kMaxTerminationMessage);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
}

}  // namespace sharemgr
