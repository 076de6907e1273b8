// What the default logger logged, seen from a test.
#pragma once

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

namespace testing_support {

// Adds a sink to the default logger while it lives, to see what was logged.
// Set up before any runtime starts its thread, gone after it stops.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    std::vector<spdlog::sink_ptr> sinks = previous_->sinks();
    sinks.push_back(sink_);
    auto logger = std::make_shared<spdlog::logger>("capture", sinks.begin(), sinks.end());
    logger->set_level(previous_->level());
    spdlog::set_default_logger(std::move(logger));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  int Count(const std::string& text) const {
    int n = 0;
    for (const auto& line : sink_->last_formatted()) n += line.find(text) != std::string::npos;
    return n;
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_ =
      std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000);
};

}  // namespace testing_support
