#include "metrics/endpoint.h"

#include <CivetServer.h>
#include <civetweb.h>
#include <prometheus/exposer.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <atomic>
#include <cstring>
#include <exception>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/socket_address.h"
#include "base/unique_fd.h"

namespace metrics {
namespace {

// civetweb's pool: scrapes come every few seconds from one or two Prometheus
// servers, so two threads serve them; a client that stalls mid-request is
// dropped after the timeout rather than holding one for good.
constexpr char kThreads[] = "2";
constexpr char kRequestTimeoutMs[] = "10000";

// The health checks of each listening port. civetweb's callbacks carry no
// pointer of ours (prometheus-cpp owns the server), so a request finds its
// endpoint's checks by the port it came in on. Shared: a probe in flight
// keeps the checks it runs while their endpoint goes.
absl::Mutex health_mu(absl::kConstInit);
std::map<int, std::shared_ptr<const HealthChecks>>& HealthByPort() {
  static auto* by_port = new std::map<int, std::shared_ptr<const HealthChecks>>();
  return *by_port;
}

std::shared_ptr<const HealthChecks> HealthOf(int port) {
  absl::MutexLock lock(&health_mu);
  const auto it = HealthByPort().find(port);
  return it == HealthByPort().end() ? nullptr : it->second;
}

int Answer(mg_connection* conn, int code, const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
            code, mg_get_response_code_text(conn, code), body.size(), body.c_str());
  return code;
}

// civetweb calls this first for every request. Returning 0 lets prometheus-cpp's
// handler answer (GET /metrics only); anything else is answered here.
int Route(mg_connection* conn) {
  const mg_request_info* request = mg_get_request_info(conn);
  const char* uri = request->local_uri_raw != nullptr ? request->local_uri_raw : "";
  const bool live = std::strcmp(uri, kLivePath) == 0;
  const bool ready = std::strcmp(uri, kReadyPath) == 0;
  std::function<absl::Status()> check;
  if (live || ready) {
    if (auto health = HealthOf(request->server_port); health != nullptr) {
      check = live ? health->live : health->ready;
    }
  }
  const bool metrics = std::strcmp(uri, kMetricsPath) == 0;
  if (!metrics && !check) {
    mg_send_http_error(conn, 404, "%s",
                       "not found: this listener serves /metrics (and its probes) only\n");
    return 404;
  }
  if (std::strcmp(request->request_method, "GET") != 0) {
    mg_send_http_error(conn, 405, "%s", "method not allowed: GET only\n");
    return 405;
  }
  if (metrics) return 0;
  const absl::Status status = check();
  return status.ok() ? Answer(conn, 200, "ok\n")
                     : Answer(conn, 503, absl::StrCat(status.message(), "\n"));
}

// Where a local connection reaches a listener bound to `listen`'s host.
std::string LocalHost(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "0.0.0.0" || host == "localhost") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

// Connects to host:port and hangs up at once (a bounded try; failures are
// ignored: the listener may be gone already).
void Knock(const std::string& host, uint16_t port) {
  const auto addr = base::IpSocketAddress(host, port);
  if (!addr.ok()) return;
  const base::UniqueFd fd(socket(addr->family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return;
  const timeval timeout{.tv_sec = 0, .tv_usec = 100'000};
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  (void)connect(fd.get(), addr->get(), addr->length);
}

}  // namespace

std::string CivetwebListen(const std::string& listen) {
  if (absl::StartsWith(listen, ":")) return listen.substr(1);
  if (absl::StartsWith(listen, "localhost:")) {
    return absl::StrCat("127.0.0.1", listen.substr(std::strlen("localhost")));
  }
  return listen;
}

absl::StatusOr<std::unique_ptr<Endpoint>> Endpoint::Start(
    const std::string& listen, std::shared_ptr<prometheus::Collectable> collectable,
    HealthChecks health) {
  static const CivetCallbacks callbacks = [] {
    CivetCallbacks c{};
    c.begin_request = Route;
    return c;
  }();
  std::unique_ptr<Endpoint> endpoint(new Endpoint());
  try {
    // civetweb reports a port it cannot bind by failing to start (the
    // Exposer throws); the listening socket is made close-on-exec by civetweb.
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", CivetwebListen(listen), "num_threads", kThreads,
                                 "request_timeout_ms", kRequestTimeoutMs},
        &callbacks);
  } catch (const std::exception&) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", listen, " (address in use or not local?)"));
  }
  const std::vector<int> ports = endpoint->exposer_->GetListeningPorts();
  if (ports.empty()) return absl::UnavailableError(absl::StrCat("no port bound for ", listen));
  endpoint->port_ = static_cast<uint16_t>(ports.front());
  endpoint->local_host_ = LocalHost(listen);
  endpoint->collectable_ = std::move(collectable);
  endpoint->exposer_->RegisterCollectable(endpoint->collectable_, kMetricsPath);
  if (health.live || health.ready) {
    absl::MutexLock lock(&health_mu);
    HealthByPort()[endpoint->port_] = std::make_shared<const HealthChecks>(std::move(health));
  }
  return endpoint;
}

// civetweb's listening thread polls its sockets with a 2 s timeout and looks
// at the stop flag only between polls, so a plain stop takes up to 2 s (a
// daemon's exit would wait for it). A connection to the port wakes the poll:
// while the stop runs, one is made every 20 ms. One accepted before the flag
// is set just reads its end at once and closes.
Endpoint::~Endpoint() {
  {
    absl::MutexLock lock(&health_mu);
    HealthByPort().erase(port_);
  }
  std::atomic<bool> stopped{false};
  std::thread knocker([&] {
    while (!stopped) {
      Knock(local_host_, port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  exposer_.reset();
  stopped = true;
  knocker.join();
}

}  // namespace metrics
