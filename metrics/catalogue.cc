#include "metrics/catalogue.h"

#include <utility>

namespace metrics {

Catalogue::Catalogue() : registry_(std::make_shared<prometheus::Registry>()) {}

prometheus::Family<prometheus::Counter>& Catalogue::AddCounter(const std::string& name,
                                                               const std::string& help) {
  entries_.push_back({name, prometheus::MetricType::Counter});
  return prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
}

prometheus::Family<prometheus::Gauge>& Catalogue::AddGauge(const std::string& name,
                                                           const std::string& help) {
  entries_.push_back({name, prometheus::MetricType::Gauge});
  return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
}

prometheus::Family<prometheus::Histogram>& Catalogue::AddHistogram(const std::string& name,
                                                                   const std::string& help) {
  entries_.push_back({name, prometheus::MetricType::Histogram});
  return prometheus::BuildHistogram().Name(name).Help(help).Register(*registry_);
}

void Catalogue::AddScraped(const std::string& name, const std::string& help,
                           prometheus::MetricType type, Scrape scrape) {
  entries_.push_back({name, type});
  scraped_.push_back({name, help, type, std::move(scrape)});
}

std::vector<prometheus::MetricFamily> Catalogue::Collect() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  for (const Scraped& s : scraped_) {
    families.push_back({.name = s.name, .help = s.help, .type = s.type, .metric = s.scrape()});
  }
  return families;
}

prometheus::ClientMetric GaugeSample(double value,
                                     std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  return m;
}

prometheus::ClientMetric CounterSample(double value,
                                       std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric m;
  m.counter.value = value;
  m.label = std::move(labels);
  return m;
}

}  // namespace metrics
