// --log-format json, for log shippers: every log line one JSON object with
// stable field names:
//   time       RFC 3339, UTC, milliseconds ("2026-11-30T00:57:57.555Z")
//   level      trace, debug, info, warning, error, critical (spdlog's names)
//   component  the logger: share-manager, ganesha (its forwarded lines),
//              grpc, share-controller
//   volume, epoch    the process's (share-manager) or the event's (controller)
//   message    the text line's message
// then the event's own fields, where the code gives them (LogFields).
// Strings are escaped (quotes, backslashes, control characters) and kept
// valid UTF-8 (an invalid byte becomes U+FFFD), so every line parses.
#pragma once

#include <spdlog/formatter.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace spdlog {
class logger;
}

namespace base {

using LogValue = std::variant<std::string, int64_t, uint64_t, double, bool>;
using LogField = std::pair<std::string, LogValue>;

// The fields of what this thread logs while the object lives, e.g.
//   base::LogFields fields({{"pid", int64_t{pid}}, {"cause", "memory"}});
//   spdlog::error("killing ganesha pid {}: {}", pid, reason);
// The JSON format adds them to each line (an inner scope's field wins over an
// outer one's or the process's of the same name); the text format leaves them
// out, its message says the same. Never "time", "level", "component" or
// "message": those are the line's own and such a field is dropped.
class LogFields {
 public:
  explicit LogFields(std::initializer_list<LogField> fields);
  ~LogFields();
  LogFields(const LogFields&) = delete;
  LogFields& operator=(const LogFields&) = delete;

 private:
  size_t count_;
};

class JsonLogFormatter final : public spdlog::formatter {
 public:
  // `component` names lines of a logger without a name (spdlog's default
  // logger); `context` fields go on every line (e.g. volume, epoch).
  JsonLogFormatter(std::string component, std::vector<LogField> context);
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;

 private:
  std::string component_;
  std::vector<LogField> context_;
};

// Every logger registered with spdlog (the default one included) writes JSON
// lines from now on, and gRPC's own log lines go through a "grpc" logger on
// the default logger's sinks instead of straight to stderr.
void UseJsonLogs(const std::string& component, std::vector<LogField> context);

// `text` as a JSON string, quotes included.
void AppendJsonString(std::string_view text, std::string& out);

}  // namespace base
