// ShareClient against a stand-in server, and StatusWatch against a port
// nobody listens on: every failed attempt is reported, and the attempts back
// off instead of spinning.
#include "controller/share_client.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/unique_fd.h"
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

TEST_CASE(
    "StatusWatch retries a share-manager that never answered every 25 ms for 2 s, then backs off "
    "doubling from 50 ms to its cap") {
  // Bound, never listening, held to the end: connections are refused, and no
  // server a test beside this one starts can take the port meanwhile.
  const base::UniqueFd held(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(held.get() >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  REQUIRE(bind(held.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(getsockname(held.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const uint16_t port = ntohs(addr.sin_port);
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
    // Past the starting window, nine more attempts. The window is counted
    // from the first failure: the watch started before it, so a failure more
    // than the window after the first one was surely followed by the backoff;
    // one counted from a time taken before the watch started may still have
    // been inside the watch's window (seen under load: the doubling looked
    // one step late).
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      return !failures.empty() && std::count_if(failures.begin(), failures.end(), [&](auto t) {
                                    return t - failures.front() > StatusWatch::kStartingWindow;
                                  }) >= 9;
    };
    REQUIRE(mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30)));
  }
  absl::MutexLock lock(&mu);
  // While starting: retried often (a pod's first status is not held back by
  // a grown backoff), but not spinning: waits of 25 ms at least (lower
  // bounds only: a loaded machine is slower, never faster).
  size_t first_after = 0;
  while (failures[first_after] - failures.front() <= StatusWatch::kStartingWindow) ++first_after;
  // About 80 on an idle machine; a backoff from the start makes 8 at most
  // (0, 50, 150, 350, 750, 1150, 1550, 1950 ms), however fast the machine.
  // Starved of CPU (load 7 on 2 cores) the retries thin out: the bound sits
  // just above what a backoff could reach.
  CHECK(first_after >= 10);
  for (size_t i = 0; i + 1 < first_after; ++i) {
    CAPTURE(i);
    CHECK(failures[i + 1] - failures[i] >= StatusWatch::kStartingRetry);
  }
  // Then: at least 50, 100, 200, 400 ms, and the 400 ms cap.
  const std::chrono::milliseconds least[] = {
      std::chrono::milliseconds(50),  std::chrono::milliseconds(100),
      std::chrono::milliseconds(200), std::chrono::milliseconds(400),
      std::chrono::milliseconds(400), std::chrono::milliseconds(400)};
  for (size_t i = 0; i < 6; ++i) {
    CAPTURE(i);
    CHECK(failures[first_after + i + 1] - failures[first_after + i] >= least[i]);
  }
  // The cap holds: uncapped, the eighth wait would be 6.4 s.
  CHECK(failures[first_after + 8] - failures[first_after + 7] < std::chrono::milliseconds(3000));
}

}  // namespace controller
