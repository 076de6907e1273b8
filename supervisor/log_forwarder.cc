#include "supervisor/log_forwarder.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>

#include "base/fmt_absl.h"

namespace supervisor {

LineLogger::LineLogger(std::shared_ptr<spdlog::logger> logger)
    : LineLogger(std::move(logger), spdlog::level::info) {}

void LineLogger::Append(std::string_view bytes) {
  partial_.append(bytes);
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    LogLine(std::string_view(partial_).substr(start, nl - start));
  }
  partial_.erase(0, start);
}

void LineLogger::Flush() {
  if (!partial_.empty()) LogLine(partial_);
  partial_.clear();
}

void LineLogger::LogLine(std::string_view line) {
  if (line.empty()) return;
  auto level = plain_;
  if (line.find(":CRIT :") != std::string_view::npos ||
      line.find(":FATAL :") != std::string_view::npos) {
    level = spdlog::level::critical;
  } else if (line.find(":MAJ :") != std::string_view::npos) {
    level = spdlog::level::err;
  } else if (line.find(":WARN :") != std::string_view::npos) {
    level = spdlog::level::warn;
  }
  // ganesha prefixes its own date, epoch and host; spdlog already stamps the time.
  if (const auto pos = line.find(" : nfs-ganesha-"); pos != std::string_view::npos) {
    line.remove_prefix(pos + 3);
  }
  logger_->log(level, "{}", line);
}

LogFileFollower::LogFileFollower(EventLoop& loop, std::string path,
                                 std::shared_ptr<spdlog::logger> logger)
    : loop_(loop),
      path_(std::move(path)),
      lines_(std::move(logger)),
      inotify_(inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
  if (!inotify_) {
    spdlog::warn("inotify unavailable; ganesha's log file {} is not forwarded", path_);
    return;
  }
  // Watch the directory: the file may not exist yet, or be recreated.
  const auto slash = path_.rfind('/');
  const std::string dir = slash == 0 ? "/" : path_.substr(0, slash);
  inotify_add_watch(inotify_.get(), dir.c_str(), IN_MODIFY | IN_CREATE | IN_MOVED_TO);
  struct stat st {};
  if (stat(path_.c_str(), &st) == 0) offset_ = st.st_size;  // old runs were logged then
  token_ = loop_.Watch(inotify_.get(), EPOLLIN, [this](uint32_t) {
    char events[4096];
    while (read(inotify_.get(), events, sizeof(events)) > 0) {
    }
    Drain();
  });
}

LogFileFollower::~LogFileFollower() {
  if (token_ != 0) loop_.Unwatch(token_);
}

void LogFileFollower::Drain() {
  base::UniqueFd fd(open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return;
  struct stat st {};
  if (fstat(fd.get(), &st) == 0 && st.st_size < offset_) offset_ = 0;  // truncated
  char buf[8192];
  for (;;) {
    const ssize_t n = pread(fd.get(), buf, sizeof(buf), offset_);
    if (n <= 0) break;
    offset_ += n;
    lines_.Append(std::string_view(buf, static_cast<size_t>(n)));
  }
}

}  // namespace supervisor
