// The health port's accept loop in front of a real gRPC server on
// 127.0.0.1: connections served, capped per peer address (a flood from
// 127.0.0.2 never locks out 127.0.0.1), the descriptors gRPC still holds for
// ended connections kept under a ceiling, slots given back when either side
// ends a connection, and accepted again after a shortage of descriptors
// (where gRPC 1.51's own listener stops for good).
#include "sharemgr/capped_listener.h"

#include <doctest/doctest.h>

#ifndef SHAREMGR_SANITIZED_BUILD
#define SHAREMGR_SANITIZED_BUILD false
#endif
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/unique_fd.h"
#include "sharemgr/health_check_only_service.h"
#include "tests/support/descriptor_shortage.h"
#include "tests/support/fake_time_source.h"
#include "tests/support/wait_for.h"

namespace sharemgr {
namespace {

using std::chrono::milliseconds;
using testing_support::WaitFor;

// A health-only gRPC server with no port of its own, fed by a CappedListener.
// Its health service is HealthCheckOnlyService unless one is given.
class Served {
 public:
  explicit Served(CappedListenerOptions options, int max_idle_ms = 0,
                  grpc::Service* health = nullptr) {
    grpc::ServerBuilder builder;
    builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
    builder.RegisterService(health != nullptr ? health : &service_);
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

  // A TCP connection that sends nothing, from 127.0.0.1 or `from`.
  base::UniqueFd Connect(const char* from = nullptr) const {
    base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(fd);
    if (from != nullptr) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      REQUIRE(inet_pton(AF_INET, from, &local.sin_addr) == 1);
      REQUIRE(bind(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)) == 0);
    }
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

// grpc.health.v1 whose Check calls are held unanswered until Release: gRPC
// keeps a connection's descriptor while a call on it is not finished, even
// after the connection was shut down.
class HeldChecks final : public grpc::health::v1::Health::CallbackService {
 public:
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* /*request*/,
                                  grpc::health::v1::HealthCheckResponse* response) override {
    auto* reactor = context->DefaultReactor();
    absl::MutexLock lock(&mu_);
    ++received_;
    held_.emplace_back(reactor, response);
    if (released_) FinishHeld();
    return reactor;
  }
  int received() const {
    absl::MutexLock lock(&mu_);
    return received_;
  }
  // Answers every held call (SERVING), and every later one at once.
  void Release() {
    absl::MutexLock lock(&mu_);
    released_ = true;
    FinishHeld();
  }

 private:
  void FinishHeld() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto [reactor, response] : held_) {
      response->set_status(grpc::health::v1::HealthCheckResponse::SERVING);
      reactor->Finish(grpc::Status::OK);
    }
    held_.clear();
  }

  mutable absl::Mutex mu_;
  int received_ ABSL_GUARDED_BY(mu_) = 0;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<grpc::ServerUnaryReactor*, grpc::health::v1::HealthCheckResponse*>> held_
      ABSL_GUARDED_BY(mu_);
};

// A Check call in flight over a connection of its own; destroyed only once answered.
class CallInFlight {
 public:
  CallInFlight(uint16_t port, int channel_id) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.channel_id", channel_id);
    stub_ = grpc::health::v1::Health::NewStub(grpc::CreateCustomChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args));
    stub_->async()->Check(&context_, &request_, &response_, [this](const grpc::Status&) {
      absl::MutexLock lock(&mu_);
      done_ = true;
    });
  }
  ~CallInFlight() {
    context_.TryCancel();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }
  bool done() const {
    absl::MutexLock lock(&mu_);
    return done_;
  }

 private:
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
  grpc::ClientContext context_;
  grpc::health::v1::HealthCheckRequest request_;
  grpc::health::v1::HealthCheckResponse response_;
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// A Served with a small cap whose Check calls gRPC holds unanswered (HeldChecks).
struct HoldingServer {
  static constexpr size_t kCap = 4;
  testing_support::FakeTimeSource clock;
  HeldChecks held;
  Served s{{.max_connections = kCap, .clock = &clock}, /*max_idle_ms=*/0, &held};

  // A Check from 127.0.0.1 over a connection of its own, once gRPC holds it
  // (or it failed: refused).
  std::unique_ptr<CallInFlight> Call(int channel_id) {
    const int received = held.received();
    auto call = std::make_unique<CallInFlight>(s.listener().port(), channel_id);
    REQUIRE(
        WaitFor([&] { return held.received() > received || call->done(); }, milliseconds(5000)));
    return call;
  }
};

// Connections accepted on `port` whose socket is still open anywhere in this
// process (gRPC's descriptor or the listener's duplicate), each counted once,
// connected or not any more: every socket whose own port is `port` but the
// listening one. (A client's own port is another.)
size_t AcceptedSocketsOpen(uint16_t port) {
  std::set<ino_t> sockets;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_in local{};
    socklen_t local_len = sizeof(local);
    int listening = 0;
    socklen_t listening_len = sizeof(listening);
    struct stat st {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        local.sin_family != AF_INET || ntohs(local.sin_port) != port ||
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &listening_len) != 0 ||
        listening != 0 || fstat(fd, &st) != 0) {
      continue;  // not a connection accepted on `port` (or closed meanwhile)
    }
    sockets.insert(st.st_ino);
  }
  return sockets.size();
}

}  // namespace

TEST_CASE(
    "the health port's listener: at the cap a connection from the same address makes room once "
    "it has been open a second") {
  testing_support::FakeTimeSource clock;
  Served s({.max_connections = 2, .clock = &clock});
  CHECK(s.Check());
  // That check's connection ended (its client hung up) and gRPC closed it:
  // its slot is free, and its address holds no ended one (at a cap of 2, one
  // would be its share and the next newcomer refused).
  REQUIRE(WaitFor(
      [&] {
        const auto counts = s.listener().counts();
        return counts.open == 0 && counts.closing == 0;
      },
      milliseconds(5000)));
  auto first = s.Connect();
  auto second = s.Connect();
  REQUIRE(WaitFor([&] { return s.listener().counts().open == 2; }, milliseconds(5000)));
  // Both just opened: a third from the same address is refused. (The
  // counts are published once the listener's round is over: waited for.)
  CHECK_FALSE(s.Check());
  CHECK(WaitFor([&] { return s.listener().counts().refused >= 1; }, milliseconds(5000)));
  CHECK(s.listener().counts().evicted == 0);
  // A second later the oldest makes room: served.
  clock.Advance(std::chrono::seconds(1));
  CHECK(s.Check());
  CHECK(ClosedByServer(first.get()));
  CHECK(WaitFor([&] { return s.listener().counts().evicted >= 1; }, milliseconds(5000)));
  CHECK(s.listener().counts().open <= 2);
}

TEST_CASE(
    "the health port's listener: one address turns its slots over at most once a second each, "
    "and is refused beyond") {
  testing_support::FakeTimeSource clock;
  Served s({.max_connections = 2, .clock = &clock});
  std::vector<base::UniqueFd> clients;
  auto connect = [&](uint64_t handled) {
    clients.push_back(s.Connect());
    REQUIRE(WaitFor(
        [&] {
          const auto counts = s.listener().counts();
          return counts.open + counts.evicted + counts.refused == handled;
        },
        milliseconds(5000)));
  };
  connect(1);
  connect(2);
  connect(3);  // refused: both open ones are younger than a second
  connect(4);
  CHECK(s.listener().counts().refused == 2);
  CHECK(s.listener().counts().evicted == 0);
  clock.Advance(std::chrono::seconds(1));
  connect(5);  // the first two make room
  // The one closed to make room holds gRPC's descriptor until gRPC closes it
  // (later on a loaded machine): meanwhile its address, at a cap of 2, may
  // hold no other ended one and gets nothing new. Waited out, as a real
  // client retrying would.
  REQUIRE(WaitFor([&] { return s.listener().counts().closing == 0; }, milliseconds(5000)));
  connect(6);
  connect(7);  // refused: the two open ones are new again
  const auto counts = s.listener().counts();
  CHECK(counts.evicted == 2);
  CHECK(counts.refused == 3);
  CHECK(counts.open == 2);
  for (size_t i : {0U, 1U, 2U, 3U, 6U}) CHECK(ClosedByServer(clients[i].get()));
}

TEST_CASE(
    "the health port's listener: a flood from another address never locks out a client's "
    "checks") {
  // A clock that never moves: no connection ever has been open a second, so
  // the flood cannot even turn its own slots over.
  testing_support::FakeTimeSource clock;
  constexpr size_t kCap = 8;
  Served s({.max_connections = kCap, .clock = &clock});
  std::vector<base::UniqueFd> flood;
  auto flood_more = [&](size_t count) {
    for (size_t i = 0; i < count; ++i) flood.push_back(s.Connect("127.0.0.2"));
    // Every flood connection taken, or closed to make room, or refused.
    REQUIRE(WaitFor(
        [&] {
          const auto counts = s.listener().counts();
          return counts.open + counts.evicted + counts.refused >= flood.size();
        },
        milliseconds(5000)));
  };
  flood_more(3 * kCap);  // the cap's worth held open, and more refused
  for (int round = 0; round < 10; ++round) {
    INFO("round ", round);
    CHECK(s.Check());  // from 127.0.0.1
    flood_more(kCap / 2);
  }
  CHECK(s.listener().counts().open <= kCap);
  CHECK(s.listener().counts().refused > 0);
  // The flood's newest were refused, not served.
  CHECK(ClosedByServer(flood.back().get()));
}

TEST_CASE(
    "the health port's listener: connections ended but not yet closed by gRPC count, half the "
    "cap's worth at most per address") {
  HoldingServer h;
  auto& s = h.s;
  constexpr size_t kCap = HoldingServer::kCap;
  std::vector<std::unique_ptr<CallInFlight>> calls;
  // Answered (and so destroyed) before the server shuts down, whatever fails.
  absl::Cleanup release = [&] {
    h.held.Release();
    calls.clear();
  };
  // Each connection carries a call gRPC holds: the connections closed to make
  // room keep their descriptor in gRPC, however long it takes.
  for (size_t i = 0; i < 4 * kCap; ++i) {
    INFO("connection ", i);
    h.clock.Advance(std::chrono::seconds(1));  // every open one may make room
    calls.push_back(h.Call(static_cast<int>(i)));
    CHECK(AcceptedSocketsOpen(s.listener().port()) <= kCap + kCap / 2);
  }
  auto counts = s.listener().counts();
  CHECK(counts.open == kCap);
  CHECK(counts.closing == kCap / 2);
  CHECK(counts.refused >= 1);
  // Answered: gRPC closes what it held, and the listener sees it.
  h.held.Release();
  CHECK(WaitFor([&] { return s.listener().counts().closing == 0; }, milliseconds(5000)));
  h.clock.Advance(std::chrono::seconds(1));
  CHECK(s.Check());
}

// Whether gRPC serves the connection `fd`: it answers the client's HTTP/2
// preface with its SETTINGS; a refused or evicted connection is closed.
bool AnswersPreface(int fd) {
  constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
  REQUIRE(send(fd, kPreface, sizeof(kPreface) - 1, MSG_NOSIGNAL) ==
          static_cast<ssize_t>(sizeof(kPreface) - 1));
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 5000) != 1) return false;
  char buf[64];
  return recv(fd, buf, sizeof(buf), 0) > 0;
}

// Whether the listener hands a new connection from `from` to gRPC rather than
// refusing it (closed at once).
bool ServedFrom(const Served& s, const char* from) { return AnswersPreface(s.Connect(from).get()); }

TEST_CASE(
    "the health port's listener: one address whose ended connections gRPC has not closed yet "
    "never fills the ceiling for another") {
  // Connections from 127.0.0.1 that end with a call gRPC still holds: as a
  // connect-and-reset loop faster than gRPC tears connections down, each
  // stays counted as closing. 127.0.0.2 must still be served meanwhile.
  HoldingServer h;
  absl::Cleanup release = [&] { h.held.Release(); };
  for (int i = 0; i < 16; ++i) {
    INFO("churn ", i);
    h.Call(i).reset();  // hung up, its call still held by gRPC
    CHECK(ServedFrom(h.s, "127.0.0.2"));
  }
  // The churning address was refused once it held its share of closing ones.
  const auto counts = h.s.listener().counts();
  CHECK(counts.refused >= 1);
  CHECK(counts.closing <= HoldingServer::kCap / 2 + 1);
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
  // gRPC has closed its descriptors of both, and the listener has seen it.
  CHECK(WaitFor([&] { return s.listener().counts().closing == 0; }, milliseconds(5000)));
}

// The descriptors of this process that hold the connection accepted on
// `port` from `client` (gRPC's and the listener's duplicate), lowest first.
std::vector<int> AcceptedDescriptorsOf(uint16_t port, int client) {
  sockaddr_in mine{};
  socklen_t mine_len = sizeof(mine);
  REQUIRE(getsockname(client, reinterpret_cast<sockaddr*>(&mine), &mine_len) == 0);
  std::vector<int> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_in local{};
    sockaddr_in peer{};
    socklen_t local_len = sizeof(local);
    socklen_t peer_len = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0 &&
        local.sin_family == AF_INET && ntohs(local.sin_port) == port &&
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0 &&
        peer.sin_port == mine.sin_port) {
      found.push_back(fd);
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

TEST_CASE(
    "the health port's listener: a connection gRPC closes without shutting it down first is "
    "noticed and ended") {
  Served s({.max_connections = 4});
  auto client = s.Connect();
  REQUIRE(WaitFor([&] { return s.listener().counts().open == 1; }, milliseconds(5000)));
  // gRPC's descriptor (the lower: the duplicate was made after it) becomes
  // another file in one step, as if gRPC had closed it without a shutdown()
  // and the number been reused: only the listener's duplicate keeps the
  // connection up, and nothing wakes the listener.
  const auto fds = AcceptedDescriptorsOf(s.listener().port(), client.get());
  REQUIRE(fds.size() == 2);
  base::UniqueFd null(open("/dev/null", O_RDONLY | O_CLOEXEC));
  REQUIRE(null);
  REQUIRE(dup3(null.get(), fds[0], O_CLOEXEC) == fds[0]);
  CHECK(WaitFor([&] { return s.listener().counts().open == 0; }, milliseconds(5000)));
  CHECK(ClosedByServer(client.get()));
}

// UBSan's first vptr check of an object needs a descriptor (a pipe): with none
// left it reports a false "invalid vptr", so the sanitizer build skips this one.
TEST_CASE("the health port's listener: out of descriptors it keeps the port and accepts later" *
          doctest::skip(SHAREMGR_SANITIZED_BUILD)) {
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

TEST_CASE(
    "the health port's listener: a new connection it cannot watch (no descriptor for its "
    "duplicate) costs no open connection its slot" *
    doctest::skip(SHAREMGR_SANITIZED_BUILD)) {  // as above: UBSan needs descriptors
  testing_support::FakeTimeSource clock;
  Served s({.max_connections = 1, .shortage_retry = milliseconds(20), .clock = &clock});
  auto open = s.Connect();
  REQUIRE(WaitFor([&] { return s.listener().counts().open == 1; }, milliseconds(5000)));
  // Open a second: a newcomer from its own address may take its slot.
  clock.Advance(std::chrono::seconds(1));
  base::UniqueFd newcomer(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(newcomer);
  {
    // One descriptor left: accept4() gets it, the duplicate does not.
    testing_support::DescriptorShortage shortage(256);
    shortage.GiveOneBack();
    s.Connect(newcomer.get());
    // (Evicted first, the open connection's descriptor may come back from gRPC in time for the
    // duplicate: no shortage then, the newcomer served in its place.)
    REQUIRE(WaitFor(
        [&] {
          const auto counts = s.listener().counts();
          return counts.shortages + counts.evicted >= 1;
        },
        milliseconds(5000)));
  }
  const auto counts = s.listener().counts();
  CHECK(counts.evicted == 0);
  CHECK(counts.shortages >= 1);
  CHECK(counts.open == 1);
  CHECK(ClosedByServer(newcomer.get()));
  CHECK(AnswersPreface(open.get()));  // still served
}

// What PinGrpcPollStrategy returns and leaves in GRPC_POLL_STRATEGY when it
// finds `inherited` there (unset: nullopt), called in a child process of its
// own as main calls it: first thing, before any gRPC object exists there.
std::pair<std::string, std::string> PinnedInChild(const std::optional<std::string>& inherited) {
  int out[2];
  REQUIRE(pipe2(out, O_CLOEXEC) == 0);
  base::UniqueFd read_end(out[0]);
  base::UniqueFd write_end(out[1]);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (inherited) {
      setenv("GRPC_POLL_STRATEGY", inherited->c_str(), 1);
    } else {
      unsetenv("GRPC_POLL_STRATEGY");
    }
    const std::string returned = PinGrpcPollStrategy();
    const char* in_force = std::getenv("GRPC_POLL_STRATEGY");
    const std::string report = absl::StrCat(returned, "\n", in_force ? in_force : "(unset)");
    const bool written =
        write(write_end.get(), report.data(), report.size()) == static_cast<ssize_t>(report.size());
    _exit(written ? 0 : 1);
  }
  write_end.reset();
  std::string report;
  char buf[256];
  for (ssize_t n; (n = read(read_end.get(), buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n > 0);
    report.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const auto newline = report.find('\n');
  REQUIRE(newline != std::string::npos);
  return {report.substr(0, newline), report.substr(newline + 1)};
}

TEST_CASE(
    "PinGrpcPollStrategy: epoll1 and poll where epoll1 cannot run unless the user chose a "
    "poller") {
  // gRPC takes the first of the list that works.
  CHECK(PinnedInChild(std::nullopt) ==
        std::pair<std::string, std::string>("epoll1,poll", "epoll1,poll"));
  CHECK(PinnedInChild("") ==
        std::pair<std::string, std::string>("epoll1,poll", "epoll1,poll"));  // as unset
  CHECK(PinnedInChild("poll") == std::pair<std::string, std::string>("poll", "poll"));
  CHECK(PinnedInChild("epoll1") == std::pair<std::string, std::string>("epoll1", "epoll1"));
}

}  // namespace sharemgr
