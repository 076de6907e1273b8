// A scrape of a --metrics-listen port with curl (as Prometheus asks), parsed by
// Prometheus' reference parser (tests/support/parse_metrics.py, the Python
// client's parser): a test reads values only through a parser that would
// refuse a malformed exposition.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"

namespace testing_support {

class MetricsScrape {
 public:
  // GET http://127.0.0.1:PORT/metrics with curl (200 and the text format's
  // content type, text/plain, required), then the parser over its body.
  static absl::StatusOr<MetricsScrape> From(uint16_t port);
  // The parser over `exposition`.
  static absl::StatusOr<MetricsScrape> Parse(const std::string& exposition);

  // A sample's value, named as `name{label="value",...}` with the labels
  // sorted by name (`name{}` without labels; `name` alone also works).
  std::optional<double> Value(const std::string& series) const;
  // The value, or 0 when the sample is absent (a counter not yet created).
  double Count(const std::string& series) const { return Value(series).value_or(0); }
  // Every sample whose name is `name`, by its label part ("{...}").
  std::map<std::string, double> Series(const std::string& name) const;
  // Family name -> type, as the parser saw them (counters without _total).
  const std::map<std::string, std::string>& families() const { return families_; }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::map<std::string, std::string> families_;
  std::map<std::string, double> samples_;
};

}  // namespace testing_support
