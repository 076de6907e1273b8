// The metrics listener on a real loopback port: GET /metrics answers the
// exposition (valid for Prometheus' reference parser), the probe paths their
// checks when given, nothing else answers.
#include "metrics/endpoint.h"

#include <doctest/doctest.h>

#include <atomic>

#include "base/loopback_port.h"
#include "metrics/catalogue.h"
#include "prometheus/text_serializer.h"
#include "tests/metrics/collected.h"
#include "tests/support/http_get.h"
#include "tests/support/metrics_scrape.h"
#include "tests/support/require_ok.h"

namespace metrics {
namespace {

using testing_support::HttpGet;
using testing_support::HttpRequest;
using testing_support::RequireOk;

std::shared_ptr<Catalogue> Sample() {
  auto catalogue = std::make_shared<Catalogue>();
  catalogue->AddCounter("test_things_total", "things").Add({{"kind", "a"}}).Increment(3);
  catalogue->AddGauge("test_level", "a level").Add({}).Set(2.5);
  catalogue->AddHistogram("test_wait_seconds", "waits")
      .Add({}, prometheus::Histogram::BucketBoundaries{0.1, 1})
      .Observe(0.5);
  catalogue->AddScraped("test_scraped", "computed when scraped", prometheus::MetricType::Gauge,
                        [] { return std::vector{GaugeSample(7, {{.name = "x", .value = "y"}})}; });
  catalogue->AddScraped("test_absent", "no samples now", prometheus::MetricType::Gauge,
                        [] { return std::vector<prometheus::ClientMetric>{}; });
  return catalogue;
}

}  // namespace

TEST_CASE("metrics endpoint: GET /metrics is the exposition, parsed by the reference parser") {
  const uint16_t port = base::FreeLoopbackPort();
  auto endpoint = RequireOk(Endpoint::Start("127.0.0.1:" + std::to_string(port), Sample()));
  CHECK(endpoint->port() == port);
  const auto scrape = RequireOk(testing_support::MetricsScrape::From(port));
  CHECK(scrape.Value("test_things_total{kind=\"a\"}") == 3);
  CHECK(scrape.Value("test_level") == 2.5);
  CHECK(scrape.Value("test_wait_seconds_count") == 1);
  CHECK(scrape.Value("test_wait_seconds_bucket{le=\"1\"}") == 1);
  CHECK(scrape.Value("test_wait_seconds_bucket{le=\"0.1\"}") == 0);
  CHECK(scrape.Value("test_scraped{x=\"y\"}") == 7);
  CHECK(scrape.families().at("test_things") == "counter");
  CHECK(scrape.families().at("test_wait_seconds") == "histogram");
  CHECK(scrape.families().count("test_absent") == 1);
}

TEST_CASE("metrics endpoint: nothing but GET /metrics is served") {
  const uint16_t port = base::FreeLoopbackPort();
  auto endpoint = RequireOk(Endpoint::Start("127.0.0.1:" + std::to_string(port), Sample()));
  CHECK(RequireOk(HttpGet("127.0.0.1", port, "/metrics")).status == 200);
  CHECK(RequireOk(HttpGet("127.0.0.1", port, "/metrics?name[]=x")).status == 200);
  for (const char* path : {"/", "/metrics/", "/metrics/x", "//metrics", "/healthz", "/metricsx",
                           "/metrics%2f", "/../metrics", "/index.html"}) {
    CAPTURE(path);
    const auto response = RequireOk(HttpGet("127.0.0.1", port, path));
    CHECK(response.status == 404);
    CHECK(response.body.find("test_things_total") == std::string::npos);
  }
  for (const char* method : {"POST", "PUT", "DELETE", "HEAD", "OPTIONS"}) {
    CAPTURE(method);
    CHECK(RequireOk(HttpRequest("127.0.0.1", port, method, "/metrics")).status == 405);
  }
}

TEST_CASE("metrics endpoint: /healthz and /readyz answer their checks, for kubelet's probes") {
  const uint16_t port = base::FreeLoopbackPort();
  std::atomic<bool> ready{false};
  auto endpoint = RequireOk(Endpoint::Start(
      "127.0.0.1:" + std::to_string(port), Sample(),
      {.live = [] { return absl::OkStatus(); },
       .ready =
           [&ready] {
             return ready ? absl::OkStatus() : absl::UnavailableError("informer not listed yet");
           }}));
  auto live = RequireOk(HttpGet("127.0.0.1", port, "/healthz"));
  CHECK(live.status == 200);
  CHECK(live.body == "ok\n");
  auto not_ready = RequireOk(HttpGet("127.0.0.1", port, "/readyz"));
  CHECK(not_ready.status == 503);
  CHECK(not_ready.body == "informer not listed yet\n");
  ready = true;
  CHECK(RequireOk(HttpGet("127.0.0.1", port, "/readyz")).status == 200);
  CHECK(RequireOk(HttpRequest("127.0.0.1", port, "POST", "/healthz")).status == 405);
  CHECK(RequireOk(HttpGet("127.0.0.1", port, "/healthz/x")).status == 404);
  CHECK(RequireOk(HttpGet("127.0.0.1", port, "/metrics")).status == 200);
  // Another endpoint without checks serves neither path.
  const uint16_t other = base::FreeLoopbackPort();
  auto plain = RequireOk(Endpoint::Start("127.0.0.1:" + std::to_string(other), Sample()));
  CHECK(RequireOk(HttpGet("127.0.0.1", other, "/healthz")).status == 404);
  CHECK(RequireOk(HttpGet("127.0.0.1", other, "/readyz")).status == 404);
}

TEST_CASE(
    "metrics endpoint: a port in use is Unavailable, and free again once the endpoint is gone") {
  const uint16_t port = base::FreeLoopbackPort();
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  {
    auto first = RequireOk(Endpoint::Start(listen, Sample()));
    const auto second = Endpoint::Start(listen, Sample());
    REQUIRE_FALSE(second.ok());
    CHECK(second.status().code() == absl::StatusCode::kUnavailable);
    CHECK(std::string(second.status().message()).find(listen) != std::string::npos);
  }
  CHECK_FALSE(HttpGet("127.0.0.1", port, "/metrics").ok());
  CHECK(Endpoint::Start(listen, Sample()).ok());
}

TEST_CASE("metrics endpoint: listen addresses as civetweb takes them") {
  CHECK(CivetwebListen("127.0.0.1:9100") == "127.0.0.1:9100");
  CHECK(CivetwebListen("[::1]:9100") == "[::1]:9100");
  CHECK(CivetwebListen(":9100") == "9100");
  CHECK(CivetwebListen("localhost:9100") == "127.0.0.1:9100");
  const uint16_t port = base::FreeLoopbackPort();
  auto endpoint = RequireOk(Endpoint::Start("localhost:" + std::to_string(port), Sample()));
  CHECK(RequireOk(HttpGet("127.0.0.1", port, "/metrics")).status == 200);
}

TEST_CASE("catalogue: every family declared is listed and collected, scraped ones included") {
  const auto catalogue = Sample();
  std::vector<std::string> names;
  for (const auto& e : catalogue->entries()) names.push_back(e.name);
  CHECK(names == std::vector<std::string>{"test_things_total", "test_level", "test_wait_seconds",
                                          "test_scraped", "test_absent"});
  const testing_support::Collected now(*catalogue);
  CHECK(now.Value("test_things_total", {{"kind", "a"}}) == 3);
  CHECK(now.Value("test_scraped", {{"x", "y"}}) == 7);
  CHECK(now.Samples("test_absent") == 0);
  CHECK(now.Family("test_absent") != nullptr);
}

}  // namespace metrics
