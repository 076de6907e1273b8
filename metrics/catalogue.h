// Every family one process exports, declared in one place: counters, gauges
// and histograms that the code updates as things happen (a
// prometheus::Registry underneath), and families computed when a scrape
// collects them. Its entries are the names a dashboard may query (the
// dashboard check compares against them). Families are declared before the
// catalogue is served; after that, updates and scrapes may come from any
// thread (prometheus-cpp's metrics are atomic or locked).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace metrics {

class Catalogue final : public prometheus::Collectable {
 public:
  // The samples of a family computed at scrape time, on the scraping thread.
  using Scrape = std::function<std::vector<prometheus::ClientMetric>()>;

  struct Entry {
    std::string name;
    prometheus::MetricType type;
  };

  Catalogue();

  prometheus::Family<prometheus::Counter>& AddCounter(const std::string& name,
                                                      const std::string& help);
  prometheus::Family<prometheus::Gauge>& AddGauge(const std::string& name, const std::string& help);
  prometheus::Family<prometheus::Histogram>& AddHistogram(const std::string& name,
                                                          const std::string& help);
  // A family whose samples `scrape` computes at every collection (what is
  // cheap to read now and stale when stored: a process's /proc, an age).
  void AddScraped(const std::string& name, const std::string& help, prometheus::MetricType type,
                  Scrape scrape);

  std::vector<prometheus::MetricFamily> Collect() const override;

  // Every family declared, in declaration order.
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  struct Scraped {
    std::string name;
    std::string help;
    prometheus::MetricType type;
    Scrape scrape;
  };

  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<Scraped> scraped_;
  std::vector<Entry> entries_;
};

// One sample for a scraped family.
prometheus::ClientMetric GaugeSample(double value,
                                     std::vector<prometheus::ClientMetric::Label> labels = {});
prometheus::ClientMetric CounterSample(double value,
                                       std::vector<prometheus::ClientMetric::Label> labels = {});

// Seconds, as Prometheus wants durations.
template <typename Duration>
double Seconds(Duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace metrics
