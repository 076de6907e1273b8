#include "base/json_log.h"

#include <grpc/support/log.h>
#include <spdlog/spdlog.h>

#include <array>
#include <chrono>
#include <cmath>
#include <ctime>

#include "absl/strings/str_cat.h"

namespace base {
namespace {

// This thread's LogFields, outermost first.
thread_local std::vector<LogField> event_fields;

constexpr std::array<std::string_view, 4> kLineFields = {"time", "level", "component", "message"};

// The length of a valid UTF-8 sequence at the start of `s`, or 0 when it is
// not one (overlong forms, surrogates and code points past U+10FFFF included).
size_t Utf8Length(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto continuation = [&](size_t i) { return i < s.size() && (byte(i) & 0xC0) == 0x80; };
  const unsigned char first = byte(0);
  if (first < 0x80) return 1;
  if (first >= 0xC2 && first <= 0xDF) return continuation(1) ? 2 : 0;
  if (first >= 0xE0 && first <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (first == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
    if (first == 0xED && byte(1) >= 0xA0) return 0;  // a surrogate
    return 3;
  }
  if (first >= 0xF0 && first <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (first == 0xF0 && byte(1) < 0x90) return 0;   // overlong
    if (first == 0xF4 && byte(1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

void AppendValue(const LogValue& value, std::string& out) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          AppendJsonString(v, out);
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          // JSON has no NaN or infinities.
          if (std::isfinite(v)) {
            absl::StrAppend(&out, v);
          } else {
            out += "null";
          }
        } else {
          absl::StrAppend(&out, v);
        }
      },
      value);
}

bool IsLineField(std::string_view name) {
  for (auto field : kLineFields) {
    if (name == field) return true;
  }
  return false;
}

// Whether a field of this name goes on the line: not one of the line's own,
// nor one picked already (then it is recorded in `picked`).
bool Pick(std::string_view name, std::vector<std::string_view>& picked) {
  if (IsLineField(name)) return false;
  for (auto seen : picked) {
    if (seen == name) return false;
  }
  picked.push_back(name);
  return true;
}

// Appends `,"name":value`.
void AppendField(const LogField& field, std::string& out) {
  out += ',';
  AppendJsonString(field.first, out);
  out += ':';
  AppendValue(field.second, out);
}

// gRPC's own log lines (errors, by default), as lines of the "grpc" logger.
void GrpcLogToSpdlog(gpr_log_func_args* args) {
  const auto logger = spdlog::get("grpc");
  if (!logger) return;
  const auto level = args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::err
                     : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                               : spdlog::level::debug;
  LogFields where({{"file", std::string(args->file != nullptr ? args->file : "")},
                   {"line", int64_t{args->line}}});
  logger->log(level, "{}", args->message != nullptr ? args->message : "");
}

}  // namespace

LogFields::LogFields(std::initializer_list<LogField> fields) : count_(fields.size()) {
  event_fields.insert(event_fields.end(), fields.begin(), fields.end());
}

LogFields::~LogFields() { event_fields.resize(event_fields.size() - count_); }

void AppendJsonString(std::string_view text, std::string& out) {
  out += '"';
  while (!text.empty()) {
    const auto c = static_cast<unsigned char>(text.front());
    size_t taken = 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          absl::StrAppend(&out, "\\u00", absl::Hex(c, absl::kZeroPad2));
        } else if (const size_t n = Utf8Length(text); n > 0) {
          out.append(text.substr(0, n));
          taken = n;
        } else {
          out += "\\ufffd";  // not UTF-8: JSON text must be
        }
    }
    text.remove_prefix(taken);
  }
  out += '"';
}

JsonLogFormatter::JsonLogFormatter(std::string component, std::vector<LogField> context)
    : component_(std::move(component)), context_(std::move(context)) {}

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const auto since_epoch = msg.time.time_since_epoch();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - secs);
  const std::time_t t = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);

  std::string line = absl::StrCat(R"({"time":")", stamp, ".",
                                  absl::Dec(ms.count(), absl::kZeroPad3), R"(Z","level":)");
  const auto level = spdlog::level::to_string_view(msg.level);
  AppendJsonString(std::string_view(level.data(), level.size()), line);
  line += R"(,"component":)";
  const std::string_view logger(msg.logger_name.data(), msg.logger_name.size());
  AppendJsonString(logger.empty() ? component_ : logger, line);
  // An event field wins over an outer one and the context's of the same name:
  // the innermost are picked first, then written in the order they were given.
  std::vector<std::string_view> written;
  std::vector<bool> keep(event_fields.size());
  for (size_t i = event_fields.size(); i-- > 0;) keep[i] = Pick(event_fields[i].first, written);
  std::string fields;
  for (size_t i = 0; i < event_fields.size(); ++i) {
    if (keep[i]) AppendField(event_fields[i], fields);
  }
  std::string context;
  for (const auto& field : context_) {
    if (Pick(field.first, written)) AppendField(field, context);
  }
  line += context;
  line += R"(,"message":)";
  AppendJsonString(std::string_view(msg.payload.data(), msg.payload.size()), line);
  line += fields;
  line += "}\n";
  dest.append(line.data(), line.data() + line.size());
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const {
  return std::make_unique<JsonLogFormatter>(component_, context_);
}

void UseJsonLogs(const std::string& component, std::vector<LogField> context) {
  if (!spdlog::get("grpc")) {
    const auto& main = spdlog::default_logger();
    auto grpc =
        std::make_shared<spdlog::logger>("grpc", main->sinks().begin(), main->sinks().end());
    grpc->set_level(main->level());
    grpc->flush_on(main->flush_level());
    spdlog::register_logger(grpc);
  }
  const JsonLogFormatter formatter(component, std::move(context));
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& logger) {
    logger->set_formatter(formatter.clone());
  });
  spdlog::default_logger()->set_formatter(formatter.clone());
  gpr_set_log_function(GrpcLogToSpdlog);
}

}  // namespace base
