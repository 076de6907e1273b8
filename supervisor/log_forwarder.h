// Forwards a child's output and its log file into spdlog, one tagged line at a time.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>

#include "base/unique_fd.h"
#include "supervisor/event_loop.h"

namespace spdlog {
class logger;
namespace level {
enum level_enum : int;
}
}  // namespace spdlog

namespace supervisor {

// Splits a byte stream into lines and logs each; ganesha's level words
// (CRIT, MAJ, WARN, ...) pick the spdlog level, `plain` (info unless given)
// is that of a line without any.
class LineLogger {
 public:
  explicit LineLogger(std::shared_ptr<spdlog::logger> logger);
  LineLogger(std::shared_ptr<spdlog::logger> logger, spdlog::level::level_enum plain)
      : logger_(std::move(logger)), plain_(plain) {}
  void Append(std::string_view bytes);
  void Flush();

 private:
  void LogLine(std::string_view line);
  std::shared_ptr<spdlog::logger> logger_;
  spdlog::level::level_enum plain_;
  std::string partial_;
};

// Follows a log file that another process appends to (inotify, no polling).
// Survives the file being truncated or created later.
class LogFileFollower {
 public:
  LogFileFollower(EventLoop& loop, std::string path, std::shared_ptr<spdlog::logger> logger);
  ~LogFileFollower();
  LogFileFollower(const LogFileFollower&) = delete;
  LogFileFollower& operator=(const LogFileFollower&) = delete;

  // Reads whatever was appended since the last call.
  void Drain();

 private:
  EventLoop& loop_;
  std::string path_;
  LineLogger lines_;
  base::UniqueFd inotify_;
  uint64_t token_ = 0;
  off_t offset_ = 0;
};

}  // namespace supervisor
