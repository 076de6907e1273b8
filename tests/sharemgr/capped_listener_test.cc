// The health port's accept loop in front of a real gRPC server on
// 127.0.0.1: connections served, capped (the oldest makes room), given back
// when either side ends them, and accepted again after a shortage of
// descriptors (where gRPC 1.51's own listener stops for good).
#include "sharemgr/capped_listener.h"

#include <doctest/doctest.h>
#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"
#include "sharemgr/health_check_only_service.h"
#include "tests/support/descriptor_shortage.h"
#include "tests/support/wait_for.h"

namespace sharemgr {
namespace {

using std::chrono::milliseconds;
using testing_support::WaitFor;

// A health-only gRPC server with no port of its own, fed by a CappedListener.
class Served {
 public:
  explicit Served(CappedListenerOptions options, int max_idle_ms = 0) {
    grpc::ServerBuilder builder;
    builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
    builder.RegisterService(&service_);
    if (max_idle_ms > 0) builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, max_idle_ms);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
    auto listener = CappedListener::Bind("127.0.0.1:0", options);
    REQUIRE_MESSAGE(listener.ok(), listener.status().ToString());
    listener_ = std::move(*listener);
    REQUIRE(listener_->port() != 0);
    listener_->Start(server_.get());
  }
  ~Served() {
    listener_->Stop();
    server_->Shutdown();
  }

  CappedListener& listener() { return *listener_; }

  // A Check over a connection of its own.
  bool Check() const {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", ++channels_);  // never a shared connection
    auto stub = grpc::health::v1::Health::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", listener_->port()), grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + milliseconds(5000));
    grpc::health::v1::HealthCheckResponse response;
    return stub->Check(&context, {}, &response).ok() &&
           response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  }

  // A TCP connection that sends nothing.
  base::UniqueFd Connect() const {
    base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(fd);
    Connect(fd.get());
    return fd;
  }
  void Connect(int fd) const {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(listener_->port());
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }

 private:
  HealthCheckOnlyService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<CappedListener> listener_;
  mutable int channels_ = 0;
};

// True once the server has closed `fd`'s connection (whatever it sent before).
bool ClosedByServer(int fd) {
  return WaitFor(
      [fd] {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 0) <= 0) return false;
        char buf[4096];
        const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        return n == 0 || (n < 0 && errno == ECONNRESET);
      },
      milliseconds(5000));
}

}  // namespace

TEST_CASE("the health port's listener: at the cap the oldest connection makes room") {
  Served s({.max_connections = 2});
  CHECK(s.Check());
  auto first = s.Connect();
  auto second = s.Connect();
  REQUIRE(WaitFor([&] { return s.listener().counts().open == 2; }, milliseconds(5000)));
  // A third: served, and the oldest open one was closed for it.
  CHECK(s.Check());
  CHECK(ClosedByServer(first.get()));
  CHECK(s.listener().counts().evicted >= 1);
  CHECK(s.listener().counts().open <= 2);
}

TEST_CASE(
    "the health port's listener: at most the cap's worth evicted per second, then new connections "
    "are refused") {
  // A clock that never moves: every eviction falls in the same second.
  struct FrozenClock final : base::TimeSource {
    base::TimePoint Now() const override { return base::TimePoint(std::chrono::hours(1)); }
  } clock;
  Served s({.max_connections = 2, .clock = &clock});
  std::vector<base::UniqueFd> clients;
  for (size_t i = 1; i <= 4; ++i) {  // two taken, then two evicted
    clients.push_back(s.Connect());
    REQUIRE(WaitFor(
        [&] {
          const auto counts = s.listener().counts();
          return counts.open + counts.evicted == i;
        },
        milliseconds(5000)));
  }
  REQUIRE(s.listener().counts().evicted == 2);
  // The third eviction in one second is not made: the newcomer is closed.
  auto refused = s.Connect();
  CHECK(ClosedByServer(refused.get()));
  CHECK(s.listener().counts().refused == 1);
  CHECK(s.listener().counts().evicted == 2);
  CHECK(ClosedByServer(clients[0].get()));
  CHECK(ClosedByServer(clients[1].get()));
  CHECK(s.listener().counts().open == 2);  // the two newest, still the server's
}

TEST_CASE("the health port's listener: a connection ended by either side gives its slot back") {
  Served s({.max_connections = 4}, /*max_idle_ms=*/300);
  {
    auto client = s.Connect();
    REQUIRE(WaitFor([&] { return s.listener().counts().open == 1; }, milliseconds(5000)));
  }  // the client hangs up
  CHECK(WaitFor([&] { return s.listener().counts().open == 0; }, milliseconds(5000)));
  // gRPC ends a connection that stays idle: its client sees it closed.
  auto idle = s.Connect();
  REQUIRE(WaitFor([&] { return s.listener().counts().open == 1; }, milliseconds(5000)));
  CHECK(ClosedByServer(idle.get()));
  CHECK(WaitFor([&] { return s.listener().counts().open == 0; }, milliseconds(5000)));
  CHECK(s.listener().counts().evicted == 0);
}

TEST_CASE("the health port's listener: out of descriptors it keeps the port and accepts later") {
  Served s({.max_connections = 4, .shortage_retry = milliseconds(20)});
  REQUIRE(s.Check());
  // Sockets made now, connected once descriptors have run out: their
  // connections wait in the backlog for an accept4() that cannot get one.
  std::vector<base::UniqueFd> waiting;
  for (int i = 0; i < 3; ++i) waiting.emplace_back(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  // Every descriptor taken, and taken again as gRPC frees some, until the
  // listener has run into the shortage.
  std::optional<testing_support::DescriptorShortage> shortage(std::in_place, 256);
  for (const auto& fd : waiting) s.Connect(fd.get());
  const bool short_of_fds = WaitFor(
      [&] {
        shortage->TakeFreed();
        return s.listener().counts().shortages >= 1;
      },
      milliseconds(5000));
  shortage.reset();
  REQUIRE(short_of_fds);
  CHECK(WaitFor([&] { return s.listener().counts().open >= 1; }, milliseconds(5000)));
  CHECK(s.Check());
}

}  // namespace sharemgr
