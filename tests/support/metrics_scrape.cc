#include "tests/support/metrics_scrape.h"

#include <fstream>
#include <iterator>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "supervisor/run_program.h"
#include "tests/support/temp_dir.h"

namespace testing_support {

absl::StatusOr<MetricsScrape> MetricsScrape::From(uint16_t port) {
  // curl, asking as Prometheus asks (HTTP/1.1, gzip accepted, OpenMetrics
  // preferred, the text format allowed), not our own HTTP code: what a
  // scraper needs is what is checked.
  const TempDir dir("sharemgr-scrape");
  const std::string body = dir.path() + "/body";
  const auto fetched = supervisor::RunProgram(
      {"curl", "--silent", "--show-error", "--compressed", "--max-time", "10", "--header",
       "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/"
       "*;q=0.1",
       "--output", body, "--write-out", "%{http_code} %{content_type}",
       absl::StrCat("http://127.0.0.1:", port, "/metrics")},
      supervisor::RunOptions{});
  if (fetched.exit_code != 0) {
    return absl::UnavailableError(
        absl::StrCat("curl failed (exit ", fetched.exit_code, "): ", fetched.output));
  }
  // The content type is how Prometheus picks its parser: text/plain is the
  // text format (prometheus-cpp 1.0 names no version; Prometheus reads it so).
  if (fetched.output.rfind("200 text/plain;", 0) != 0) {
    return absl::UnavailableError(absl::StrCat("GET /metrics answered: ", fetched.output));
  }
  std::ifstream in(body);
  return Parse(std::string(std::istreambuf_iterator<char>(in), {}));
}

absl::StatusOr<MetricsScrape> MetricsScrape::Parse(const std::string& exposition) {
  const TempDir dir("sharemgr-scrape");
  const std::string file = dir.path() + "/metrics.txt";
  std::ofstream(file) << exposition;
  const auto parsed = supervisor::RunProgram(
      // Debian's interpreter, which Debian's python3-prometheus-client is for
      // (a python3 earlier in PATH, e.g. pyenv's, may not have it).
      {"/usr/bin/python3", std::string(SHAREMGR_TESTS_DIR) + "/support/parse_metrics.py", file},
      supervisor::RunOptions{});
  if (parsed.exit_code != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the reference parser refused it (exit ",
                                                   parsed.exit_code, "): ", parsed.output));
  }
  MetricsScrape scrape;
  scrape.text_ = exposition;
  for (absl::string_view line : absl::StrSplit(parsed.output, '\n', absl::SkipEmpty())) {
    // KIND NAME VALUE; a label value may hold spaces, so NAME is what lies between.
    const size_t first = line.find(' ');
    const size_t last = line.rfind(' ');
    const absl::string_view kind = line.substr(0, first);
    const std::string name(line.substr(first + 1, last - first - 1));
    const std::string value_text(line.substr(last + 1));
    if (first != last && kind == "TYPE") {
      scrape.families_[name] = value_text;
    } else if (first != last && kind == "SAMPLE") {
      double value = 0;
      if (value_text == "nan") {
        value = std::numeric_limits<double>::quiet_NaN();
      } else if (!absl::SimpleAtod(value_text, &value)) {
        return absl::DataLossError(absl::StrCat("unreadable value in: ", line));
      }
      scrape.samples_[name] = value;
    } else {
      return absl::DataLossError(absl::StrCat("unexpected parser line: ", line));
    }
  }
  return scrape;
}

std::optional<double> MetricsScrape::Value(const std::string& series) const {
  const std::string key = series.find('{') == std::string::npos ? series + "{}" : series;
  auto it = samples_.find(key);
  if (it == samples_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, double> MetricsScrape::Series(const std::string& name) const {
  std::map<std::string, double> out;
  for (auto it = samples_.lower_bound(name + "{"); it != samples_.end(); ++it) {
    if (it->first.rfind(name + "{", 0) != 0) break;
    out[it->first.substr(name.size())] = it->second;
  }
  return out;
}

}  // namespace testing_support
