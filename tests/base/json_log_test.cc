#include "base/json_log.h"

#include <doctest/doctest.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <regex>
#include <sstream>

namespace base {
namespace {

using google::protobuf::Struct;

// A logger writing JSON lines into a string.
struct Capture {
  std::ostringstream out;
  std::shared_ptr<spdlog::logger> logger;

  explicit Capture(const std::string& name, std::vector<LogField> context = {}) {
    logger = std::make_shared<spdlog::logger>(
        name, std::make_shared<spdlog::sinks::ostream_sink_st>(out));
    logger->set_level(spdlog::level::trace);
    logger->set_formatter(std::make_unique<JsonLogFormatter>("share-controller", context));
  }

  // Every line parsed by protobuf's (strict) JSON parser.
  std::vector<Struct> Lines() {
    std::vector<Struct> lines;
    std::istringstream in(out.str());
    for (std::string line; std::getline(in, line);) {
      Struct parsed;
      const auto status = google::protobuf::util::JsonStringToMessage(line, &parsed);
      REQUIRE_MESSAGE(status.ok(), status.ToString(), " in: ", line);
      lines.push_back(parsed);
    }
    return lines;
  }
};

std::string Text(const Struct& s, const std::string& field) {
  const auto it = s.fields().find(field);
  REQUIRE_MESSAGE(it != s.fields().end(), "no field ", field);
  return it->second.string_value();
}

double Number(const Struct& s, const std::string& field) {
  const auto it = s.fields().find(field);
  REQUIRE_MESSAGE(it != s.fields().end(), "no field ", field);
  return it->second.number_value();
}

}  // namespace

TEST_CASE(
    "a JSON log line is one object on one line with time, level, component, volume, epoch and "
    "message, whatever bytes the message holds") {
  Capture capture("share-manager", {{"volume", std::string("pvc-1")}, {"epoch", uint64_t{7}}});
  const std::string nasty =
      "say \"hi\"\\ now\nsecond line\r\ttab \x01\x1b[31mred\x7f é € 😀 \xff \xc0\x80 \xed\xa0\x80 "
      "cut \xe2\x82";
  capture.logger->warn("{}", nasty);
  const std::string raw = capture.out.str();
  CHECK(std::count(raw.begin(), raw.end(), '\n') == 1);  // the message's newline is escaped
  CHECK(raw.back() == '\n');
  const auto lines = capture.Lines();
  REQUIRE(lines.size() == 1);
  const Struct& line = lines[0];
  CHECK(std::regex_match(Text(line, "time"),
                         std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
  CHECK(Text(line, "level") == "warning");
  CHECK(Text(line, "component") == "share-manager");
  CHECK(Text(line, "volume") == "pvc-1");
  CHECK(Number(line, "epoch") == 7);
  // Every byte back as it was, except what is not UTF-8: U+FFFD each.
  CHECK(
      Text(line, "message") ==
      "say \"hi\"\\ now\nsecond line\r\ttab \x01\x1b[31mred\x7f é € 😀 \xef\xbf\xbd "
      "\xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd cut \xef\xbf\xbd\xef\xbf\xbd");
  CHECK(line.fields().size() == 6);
}

TEST_CASE("JSON strings escape quotes, backslashes and control characters, nothing else") {
  std::string out;
  AppendJsonString("a\"b\\c\nd\re\tf\x01g\x1fh\x7fi/é", out);
  CHECK(out == R"("a\"b\\c\nd\re\tf\u0001g\u001fh\u007fi/é")");
}

TEST_CASE(
    "an event's fields join the line while they are in scope: the innermost wins, the line's own "
    "names are kept") {
  Capture capture("", {{"volume", std::string("process-volume")}});
  {
    LogFields outer({{"volume", std::string("pvc-2")}, {"pid", int64_t{42}}});
    {
      LogFields inner({{"pid", int64_t{43}},
                       {"cause", std::string("memory")},
                       {"over", true},
                       {"rss_bytes", uint64_t{1} << 40},
                       {"ratio", 0.5},
                       {"message", std::string("not the message")},
                       {"level", std::string("not the level")}});
      capture.logger->info("killing ganesha");
    }
    capture.logger->error("after");
  }
  capture.logger->debug("no fields");
  const auto lines = capture.Lines();
  REQUIRE(lines.size() == 3);
  CHECK(Text(lines[0], "component") == "share-controller");  // an unnamed logger's
  CHECK(Text(lines[0], "message") == "killing ganesha");
  CHECK(Text(lines[0], "level") == "info");
  CHECK(Text(lines[0], "volume") == "pvc-2");
  CHECK(Number(lines[0], "pid") == 43);
  CHECK(Text(lines[0], "cause") == "memory");
  CHECK(lines[0].fields().at("over").bool_value());
  CHECK(Number(lines[0], "rss_bytes") == 1099511627776.0);
  CHECK(Number(lines[0], "ratio") == 0.5);
  CHECK(Number(lines[1], "pid") == 42);
  CHECK(lines[1].fields().count("cause") == 0);
  CHECK(Text(lines[2], "volume") == "process-volume");
  CHECK(lines[2].fields().count("pid") == 0);
  // Each name once per line: a parser that keeps the last would see another value.
  const std::string raw = capture.out.str();
  const std::string first = raw.substr(0, raw.find('\n'));
  for (const char* name : {"\"pid\":", "\"volume\":", "\"message\":", "\"level\":"}) {
    CAPTURE(name);
    CHECK(first.find(name) == first.rfind(name));
  }
}

}  // namespace base
