// container/grafana-dashboard.json against the code: every metric name its
// queries (and any other text in it) mention is one share-manager or
// share-controller exports, and every family they export has a panel. And
// README's Metrics tables: one row for each family, none for another.
#include <doctest/doctest.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "controller/cmd/controller_metrics.h"
#include "sharemgr/metrics.h"

namespace {

using google::protobuf::Value;

std::string ReadSource(const std::string& path) {
  std::ifstream in(std::string(SHAREMGR_SOURCE_DIR) + "/" + path);
  REQUIRE_MESSAGE(in.good(), path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string ReadDashboard() { return ReadSource("container/grafana-dashboard.json"); }

// Every string in the JSON document, recursively.
void Strings(const Value& v, std::vector<std::string>& out) {
  switch (v.kind_case()) {
    case Value::kStringValue:
      out.push_back(v.string_value());
      break;
    case Value::kListValue:
      for (const auto& item : v.list_value().values()) Strings(item, out);
      break;
    case Value::kStructValue:
      for (const auto& [key, item] : v.struct_value().fields()) Strings(item, out);
      break;
    default:
      break;
  }
}

// The sharemgr_* names a dashboard's strings mention.
std::set<std::string> MentionedMetrics(const std::string& json) {
  Value doc;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, &doc);
  REQUIRE_MESSAGE(parsed.ok(), "the dashboard is not JSON: ", parsed.ToString());
  std::vector<std::string> strings;
  Strings(doc, strings);
  std::set<std::string> names;
  const std::regex metric("sharemgr_[a-z0-9_]+");
  for (const auto& s : strings) {
    for (std::sregex_iterator it(s.begin(), s.end(), metric), end; it != end; ++it) {
      names.insert(it->str());
    }
  }
  return names;
}

// Exported series names: the families, and a histogram's _bucket, _sum and _count.
std::set<std::string> Exported(const std::vector<metrics::Catalogue::Entry>& entries) {
  std::set<std::string> names;
  for (const auto& e : entries) {
    names.insert(e.name);
    if (e.type == prometheus::MetricType::Histogram) {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) names.insert(e.name + suffix);
    }
  }
  return names;
}

// What a dashboard mentions that nothing exports.
std::set<std::string> Unknown(const std::set<std::string>& mentioned,
                              const std::set<std::string>& exported) {
  std::set<std::string> unknown;
  for (const auto& name : mentioned) {
    if (exported.count(name) == 0) unknown.insert(name);
  }
  return unknown;
}

// The sharemgr_* names in the first column of the tables of README's
// "## Metrics" section (a row may name several: `a`, `b`).
std::set<std::string> ReadmeTableMetrics(const std::string& readme) {
  const auto start = readme.find("\n## Metrics\n");
  REQUIRE(start != std::string::npos);
  const auto end = readme.find("\n## ", start + 1);
  std::istringstream section(readme.substr(start, end - start));
  std::set<std::string> names;
  const std::regex metric("sharemgr_[a-z0-9_]+");
  for (std::string line; std::getline(section, line);) {
    if (!line.starts_with("| `sharemgr_")) continue;
    const std::string first = line.substr(0, line.find(" | "));
    for (std::sregex_iterator it(first.begin(), first.end(), metric), none; it != none; ++it) {
      names.insert(it->str());
    }
  }
  return names;
}

std::vector<metrics::Catalogue::Entry> AllEntries() {
  sharemgr::ShareMetrics share;
  controller::ControllerMetrics controller;
  auto entries = share.catalogue()->entries();
  const auto& more = controller.catalogue()->entries();
  entries.insert(entries.end(), more.begin(), more.end());
  return entries;
}

}  // namespace

TEST_CASE("the Grafana dashboard queries only metrics the code exports, and shows all of them") {
  const auto entries = AllEntries();
  const auto exported = Exported(entries);
  const auto mentioned = MentionedMetrics(ReadDashboard());
  REQUIRE(mentioned.size() > 10);
  CHECK_MESSAGE(Unknown(mentioned, exported).empty(), "queried, never exported: ", [&] {
    std::string list;
    for (const auto& n : Unknown(mentioned, exported)) list += n + " ";
    return list;
  }());
  for (const auto& e : entries) {
    CAPTURE(e.name);
    const bool shown =
        mentioned.count(e.name) > 0 ||
        (e.type == prometheus::MetricType::Histogram &&
         (mentioned.count(e.name + "_bucket") > 0 || mentioned.count(e.name + "_sum") > 0));
    CHECK_MESSAGE(shown, "exported, on no panel");
  }
}

TEST_CASE("the dashboard check bites: a misspelt metric, or a histogram's suffix on a gauge") {
  const auto exported = Exported(AllEntries());
  const std::string dashboard = R"json({"panels": [{"targets": [
      {"expr": "rate(sharemgr_ganesha_deaths_total[5m])"},
      {"expr": "sharemgr_ganesha_death_total"},
      {"expr": "histogram_quantile(0.9, rate(sharemgr_ganesha_probe_duration_seconds_bucket[1m]))"},
      {"expr": "sharemgr_ganesha_threads_bucket"}]}]})json";
  CHECK(Unknown(MentionedMetrics(dashboard), exported) ==
        std::set<std::string>{"sharemgr_ganesha_death_total", "sharemgr_ganesha_threads_bucket"});
}

TEST_CASE("README's metric tables list every family the code exports, and no other") {
  std::set<std::string> declared;
  for (const auto& e : AllEntries()) declared.insert(e.name);
  const std::string readme = ReadSource("README.md");
  CHECK(ReadmeTableMetrics(readme) == declared);
  // The check bites: a row gone is a family missing.
  const std::string row = "| `sharemgr_ganesha_memory_limit_bytes` |";
  const auto at = readme.find(row);
  REQUIRE(at != std::string::npos);
  std::string without = readme;
  without.erase(at, readme.find('\n', at) + 1 - at);
  std::set<std::string> missing = declared;
  missing.erase("sharemgr_ganesha_memory_limit_bytes");
  CHECK(ReadmeTableMetrics(without) == missing);
}
