// A minimal HTTP/1.0 client over a plain socket, for the metrics listener:
// one request, the whole answer read until the server closes, all within a
// deadline. Enough to scrape /metrics and to see what else the port answers.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace testing_support {

struct HttpResponse {
  int status = 0;  // 200, 404, ...
  std::string headers;
  std::string body;
};

absl::StatusOr<HttpResponse> HttpRequest(
    const std::string& host, uint16_t port, const std::string& method, const std::string& path,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

inline absl::StatusOr<HttpResponse> HttpGet(const std::string& host, uint16_t port,
                                            const std::string& path) {
  return HttpRequest(host, port, "GET", path);
}

}  // namespace testing_support
