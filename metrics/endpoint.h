// The metrics listener (--metrics-listen): plain HTTP, as Prometheus scrapes,
// served by prometheus-cpp's Exposer (civetweb). It answers `GET /metrics`
// (the exact path; a query string is ignored) with the text exposition, and
// `GET /healthz` and `/readyz` when given health checks (kubelet's httpGet
// probes), and nothing else: any other path gets 404 and any other method
// 405, before civetweb looks further (it would otherwise serve
// /metrics/anything too). Its threads are civetweb's own, started here and joined when it goes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

namespace prometheus {
class Exposer;
}

namespace metrics {

inline constexpr char kMetricsPath[] = "/metrics";
inline constexpr char kLivePath[] = "/healthz";
inline constexpr char kReadyPath[] = "/readyz";

// What the probe paths answer: 200 "ok" when the check returns OK, 503 and
// its message otherwise. A path whose check is unset is not served (404).
// Called on civetweb's threads: thread-safe, and quick (a probe has a timeout).
struct HealthChecks {
  std::function<absl::Status()> live;   // kLivePath
  std::function<absl::Status()> ready;  // kReadyPath
};

// What civetweb's listening_ports option takes for a listen address that
// base::ValidateListen accepted: "HOST:PORT" and "[V6]:PORT" as they are,
// ":PORT" (every interface) as "PORT", "localhost:PORT" as "127.0.0.1:PORT".
std::string CivetwebListen(const std::string& listen);

class Endpoint {
 public:
  // Serves `collectable` on `listen` (checked by base::ValidateListen). The
  // collectable is collected on civetweb's threads, one scrape at a time per
  // thread: it must be thread-safe. Unavailable when the address cannot be
  // bound (in use, not local).
  static absl::StatusOr<std::unique_ptr<Endpoint>> Start(
      const std::string& listen, std::shared_ptr<prometheus::Collectable> collectable,
      HealthChecks health = {});
  // Stops listening and joins civetweb's threads: no scrape runs after this.
  // Takes milliseconds (see the .cc for how), not civetweb's 2 s.
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // The port bound (the one asked for).
  uint16_t port() const { return port_; }

 private:
  Endpoint() = default;

  std::shared_ptr<prometheus::Collectable> collectable_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  uint16_t port_ = 0;
  // An address of this listener that a local connection reaches.
  std::string local_host_;
};

}  // namespace metrics
