// What a Collectable (a metrics::Catalogue) holds right now, for unit tests:
// one Collect(), then samples looked up by family name and labels.
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace testing_support {

class Collected {
 public:
  using Labels = std::map<std::string, std::string>;

  explicit Collected(const prometheus::Collectable& c) : families_(c.Collect()) {}

  const prometheus::MetricFamily* Family(const std::string& name) const {
    for (const auto& f : families_) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }
  // The sample of `name` with exactly `labels`; nullptr when absent.
  const prometheus::ClientMetric* Find(const std::string& name, const Labels& labels = {}) const {
    const auto* family = Family(name);
    if (family == nullptr) return nullptr;
    for (const auto& m : family->metric) {
      Labels have;
      for (const auto& l : m.label) have[l.name] = l.value;
      if (have == labels) return &m;
    }
    return nullptr;
  }
  size_t Samples(const std::string& name) const {
    const auto* family = Family(name);
    return family == nullptr ? 0 : family->metric.size();
  }
  // A counter's or gauge's value; the test fails when there is no such sample.
  double Value(const std::string& name, const Labels& labels = {}) const {
    const auto* m = Find(name, labels);
    REQUIRE_MESSAGE(m != nullptr, "no sample ", name);
    return Family(name)->type == prometheus::MetricType::Counter ? m->counter.value
                                                                 : m->gauge.value;
  }
  uint64_t HistogramCount(const std::string& name, const Labels& labels = {}) const {
    const auto* m = Find(name, labels);
    REQUIRE_MESSAGE(m != nullptr, "no histogram ", name);
    return m->histogram.sample_count;
  }
  double HistogramSum(const std::string& name, const Labels& labels = {}) const {
    const auto* m = Find(name, labels);
    REQUIRE_MESSAGE(m != nullptr, "no histogram ", name);
    return m->histogram.sample_sum;
  }

 private:
  std::vector<prometheus::MetricFamily> families_;
};

}  // namespace testing_support
