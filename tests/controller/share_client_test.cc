// ShareClient against a stand-in server, and StatusWatch against a port
// nobody listens on: every failed attempt is reported, and the attempts back
// off instead of spinning.
#include "controller/share_client.h"

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/loopback_port.h"
#include "tests/controller/fake_share_manager.h"

namespace controller {

TEST_CASE(
    "ShareClient: Unmount reaches the server (the stand-in refuses it Unimplemented), Check is "
    "true for the server's overall health and NotFound for an unknown service") {
  grpc::EnableDefaultHealthCheckService(true);  // this process only: one ctest entry per case
  sharemanager::v1::ShareStatus status;
  status.set_volume("vol");
  FixedServer server(status);
  ShareClient client(server.At(Pod{}).endpoint);
  // The stand-in implements no Unmount: the call arrives and is refused.
  CHECK(client.Unmount(1).code() == absl::StatusCode::kUnimplemented);
  auto serving = client.Check("");
  REQUIRE(serving.ok());
  CHECK(*serving);
  CHECK(client.Check("no-such-service").status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("StatusWatch reconnects to a closed port with a doubling backoff up to its cap") {
  const uint16_t port = base::FreeLoopbackPort();  // free a moment ago: refuses connections
  REQUIRE(port != 0);
  absl::Mutex mu;
  std::vector<std::chrono::steady_clock::time_point> failures;
  {
    StatusWatch watch(
        "127.0.0.1:" + std::to_string(port),
        [&](const StatusWatch::Event& e) {
          CHECK_FALSE(e.status.has_value());
          CHECK_FALSE(e.error.empty());
          absl::MutexLock lock(&mu);
          failures.push_back(std::chrono::steady_clock::now());
        },
        base::ClientSecurity{}, std::chrono::milliseconds(400));
    absl::MutexLock lock(&mu);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return failures.size() >= 9; };
    REQUIRE(mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30)));
  }
  // The waits between attempts are at least 50, 100, 200, 400 ms and then
  // stay at the 400 ms cap (lower bounds only: a loaded machine is slower,
  // never faster). A spinning watch would report thousands in this time.
  const std::chrono::milliseconds least[] = {
      std::chrono::milliseconds(50),  std::chrono::milliseconds(100),
      std::chrono::milliseconds(200), std::chrono::milliseconds(400),
      std::chrono::milliseconds(400), std::chrono::milliseconds(400)};
  absl::MutexLock lock(&mu);
  for (size_t i = 0; i + 1 < 7; ++i) {
    CAPTURE(i);
    CHECK(failures[i + 1] - failures[i] >= least[i]);
  }
  // The cap holds: uncapped, the eighth wait would be 6.4 s.
  CHECK(failures[8] - failures[7] < std::chrono::milliseconds(3000));
}

}  // namespace controller
