// Who may call a real share-manager and what a caller can make it spend, over
// real gRPC on 127.0.0.1 and a real unix socket: the caps on streams and
// message sizes refuse the excess with RESOURCE_EXHAUSTED while health and
// reads keep answering, the fence holds, Longhorn's unfenced service exists
// only when asked for, and the socket is its owner's.
#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/files.h"
#include "base/unique_fd.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "longhorn/smrpc.grpc.pb.h"
#include "tests/support/daemon_process.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait_for.h"

namespace {

namespace v1 = sharemanager::v1;
using std::chrono::milliseconds;
using testing_support::DaemonProcess;
using testing_support::RequireOk;
using testing_support::RunCommand;
using testing_support::ShareManagerBinary;

std::unique_ptr<DaemonProcess> StartDaemon(std::vector<std::string> flags = {}) {
  auto d = DaemonProcess::Start({.extra_flags = std::move(flags)});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  return std::move(*d);
}

std::chrono::system_clock::time_point In(milliseconds ms) {
  return std::chrono::system_clock::now() + ms;
}

// Many WatchStatus streams opened at once over a few connections (HTTP/2
// limits the streams of one connection) with the async API: no thread per
// stream on this side. Each ends either with its first status (accepted, then
// left idle) or with the server's refusal.
class StreamFlood {
 public:
  StreamFlood(const std::string& addr, size_t streams, int connections) : calls_(streams) {
    for (int c = 0; c < connections; ++c) {
      grpc::ChannelArguments args;
      args.SetInt("grpc.channel_id", c);  // distinct connections, not one shared subchannel
      stubs_.push_back(v1::ShareManager::NewStub(
          grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args)));
    }
    for (size_t i = 0; i < calls_.size(); ++i) {
      Call& call = calls_[i];
      call.reader = stubs_[i % stubs_.size()]->PrepareAsyncWatchStatus(
          &call.context, v1::WatchStatusRequest(), &queue_);
      call.reader->StartCall(Tag(i, kStarted));
    }
  }

  ~StreamFlood() {
    for (auto& call : calls_) call.context.TryCancel();
    // Every operation still in flight comes back (cancelled) before the queue
    // and the calls it points into go away.
    while (outstanding_ > 0) Step(In(milliseconds(10'000)));
    queue_.Shutdown();
    void* tag;
    bool ok;
    while (queue_.Next(&tag, &ok)) {
    }
  }

  // Runs until every stream has either its first status or its final status.
  // False when that takes longer than `timeout`.
  bool Settle(milliseconds timeout) {
    const auto deadline = In(timeout);
    while (accepted_ + refused_.size() < calls_.size()) {
      if (!Step(deadline)) return false;
    }
    return true;
  }

  // Steps until `done` holds: false when it still does not after `timeout`.
  bool RunUntil(const std::function<bool()>& done, milliseconds timeout) {
    const auto deadline = In(timeout);
    while (!done()) {
      if (!Step(deadline)) return false;
    }
    return true;
  }

  // Cancels `count` accepted streams (idle: nothing of theirs is in the queue).
  void CancelAccepted(size_t count) {
    for (auto& call : calls_) {
      if (count == 0) return;
      if (call.accepted) {
        call.context.TryCancel();
        call.accepted = false;
        --count;
      }
    }
  }

  size_t accepted() const { return accepted_; }
  const std::vector<grpc::Status>& refused() const { return refused_; }

 private:
  enum Phase : uintptr_t { kStarted, kFirstRead, kFinished, kPhases };
  struct Call {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientAsyncReader<v1::ShareStatus>> reader;
    v1::ShareStatus first;
    grpc::Status status;
    bool accepted = false;  // and not cancelled by CancelAccepted
  };

  void* Tag(size_t call, Phase phase) {
    ++outstanding_;
    return reinterpret_cast<void*>(call * kPhases + phase);
  }

  bool Step(std::chrono::system_clock::time_point deadline) {
    void* tag;
    bool ok;
    if (queue_.AsyncNext(&tag, &ok, deadline) != grpc::CompletionQueue::GOT_EVENT) return false;
    --outstanding_;
    const auto value = reinterpret_cast<uintptr_t>(tag);
    Call& call = calls_[value / kPhases];
    switch (static_cast<Phase>(value % kPhases)) {
      case kStarted:
        call.reader->Read(&call.first, Tag(value / kPhases, kFirstRead));
        break;
      case kFirstRead:
        if (ok) {
          ++accepted_;  // then left idle, open until cancelled
          call.accepted = true;
        } else {
          call.reader->Finish(&call.status, Tag(value / kPhases, kFinished));
        }
        break;
      case kFinished:
        refused_.push_back(call.status);
        break;
      case kPhases:
        break;
    }
    return true;
  }

  grpc::CompletionQueue queue_;
  std::vector<std::unique_ptr<v1::ShareManager::Stub>> stubs_;
  std::vector<Call> calls_;
  size_t outstanding_ = 0;
  size_t accepted_ = 0;
  std::vector<grpc::Status> refused_;
};

// TCP connections to 127.0.0.1:port that send nothing and stay open until
// Close: each costs the server a file descriptor.
class ConnectionFlood {
 public:
  ConnectionFlood(uint16_t port, int count) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < count; ++i) {
      base::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      REQUIRE(fd);
      const int rc = connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      REQUIRE((rc == 0 || errno == EINPROGRESS));
      fds_.push_back(std::move(fd));
    }
  }
  void Close() { fds_.clear(); }

 private:
  std::vector<base::UniqueFd> fds_;
};

// Health probes as kubelet sends them, on the plaintext health port and on the
// API port, every 100 ms from their own thread while it runs, each within the
// manifest's probe timeout (deploy/base/share-manager-pod.yaml: liveness
// 2 s, readiness 1 s). Liveness must say SERVING; readiness only has to
// answer, since the flood's Unmounts withdraw the export and readiness
// rightly says NOT_SERVING then. As kubelet judges (liveness' failureThreshold
// is 3), a probe fails the watch when it fails 3 times in a row on one port:
// one late answer while 36 threads share 2 cores (under ASan in CI) is no
// outage, three in a row are more than 3 s without an answer.
class HealthWatch {
 public:
  HealthWatch(const std::string& health_addr, const std::string& api_addr) {
    for (const auto& addr : {health_addr, api_addr}) {
      ports_.push_back({addr, grpc::health::v1::Health::NewStub(
                                  grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()))});
    }
    thread_ = std::jthread([this](std::stop_token stop) {
      while (!stop.stop_requested()) {
        for (const auto& port : ports_) {
          Probe(port, "liveness", kLivenessTimeout, /*must_serve=*/true);
          Probe(port, "readiness", kReadinessTimeout, /*must_serve=*/false);
        }
        rounds_.fetch_add(1);
        std::this_thread::sleep_for(milliseconds(100));
      }
    });
  }

  int rounds() const { return rounds_.load(); }
  // Every failed probe, and the streaks of kFailureThreshold in a row.
  std::vector<std::string> failures() const {
    absl::MutexLock lock(&mu_);
    return failures_;
  }
  std::vector<std::string> outages() const {
    absl::MutexLock lock(&mu_);
    return outages_;
  }

 private:
  static constexpr milliseconds kLivenessTimeout{2000};
  static constexpr milliseconds kReadinessTimeout{1000};
  static constexpr int kFailureThreshold = 3;
  struct Port {
    std::string addr;
    std::unique_ptr<grpc::health::v1::Health::Stub> stub;
  };

  void Probe(const Port& port, const std::string& service, milliseconds timeout, bool must_serve) {
    grpc::ClientContext context;
    context.set_deadline(In(timeout));
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    const auto rpc = port.stub->Check(&context, request, &response);
    std::string failure;
    if (!rpc.ok()) {
      failure = absl::StrCat("code ", rpc.error_code(), ": ", rpc.error_message());
    } else if (must_serve && response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
      failure = absl::StrCat("status ", response.status());
    }
    const std::string probe = absl::StrCat(service, " on ", port.addr);
    absl::MutexLock lock(&mu_);
    if (failure.empty()) {
      in_a_row_[probe] = 0;
      return;
    }
    failures_.push_back(absl::StrCat(probe, " in round ", rounds_.load(), ": ", failure));
    if (++in_a_row_[probe] == kFailureThreshold) {
      outages_.push_back(absl::StrCat(probe, ": ", kFailureThreshold,
                                      " failed in a row, up to round ", rounds_.load()));
    }
  }

  std::vector<Port> ports_;
  std::atomic<int> rounds_{0};
  mutable absl::Mutex mu_;
  std::vector<std::string> failures_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> outages_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> in_a_row_ ABSL_GUARDED_BY(mu_);
  std::jthread thread_;  // last: stops and joins before the rest goes
};

// Blocking calls from many threads over several connections until Stop: each
// changer sends Mount (one generation past the newest it saw handled, as a
// controller asks), Unmount and FilesystemTrim in turn with the daemon's
// epoch; each reader sends GetStatus. Every answer is tallied by method, code
// and message (the refusals' messages say which cap refused).
class CallFlood {
 public:
  CallFlood(const std::string& addr, int connections, int changers, int readers, uint64_t epoch)
      : epoch_(epoch) {
    for (int c = 0; c < connections; ++c) {
      grpc::ChannelArguments args;
      args.SetInt("grpc.channel_id", c);  // distinct connections, not one shared subchannel
      stubs_.push_back(v1::ShareManager::NewStub(
          grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args)));
    }
    for (int t = 0; t < changers + readers; ++t) {
      v1::ShareManager::Stub& stub = *stubs_[static_cast<size_t>(t) % stubs_.size()];
      const bool changer = t < changers;
      threads_.emplace_back([this, &stub, changer, t](std::stop_token stop) {
        for (int call = t; !stop.stop_requested(); ++call) {
          if (changer) {
            Change(stub, call % 3);
          } else {
            v1::ShareStatus response;
            Count("GetStatus",
                  Send(stub, &v1::ShareManager::Stub::GetStatus, v1::GetStatusRequest(), response));
          }
        }
      });
    }
  }

  void Stop() {
    for (auto& thread : threads_) thread.request_stop();
    threads_.clear();  // joins
  }

  // (method, code, message) -> how many calls ended so.
  using Tally = std::map<std::tuple<std::string, grpc::StatusCode, std::string>, int>;
  Tally tally() const {
    absl::MutexLock lock(&mu_);
    return tally_;
  }

 private:
  template <typename Request, typename Response>
  static grpc::Status Send(v1::ShareManager::Stub& stub,
                           grpc::Status (v1::ShareManager::Stub::*method)(grpc::ClientContext*,
                                                                          const Request&,
                                                                          Response*),
                           const Request& request, Response& response) {
    grpc::ClientContext context;
    // Generous: only a hang runs into it (and DEADLINE_EXCEEDED is not accepted).
    context.set_deadline(In(milliseconds(20'000)));
    return (stub.*method)(&context, request, &response);
  }

  void Change(v1::ShareManager::Stub& stub, int which) {
    switch (which) {
      case 0: {
        v1::MountRequest request;
        request.set_epoch(epoch_);
        request.set_generation(handled_.load() + 1);
        v1::MountResponse response;
        const auto status = Send(stub, &v1::ShareManager::Stub::Mount, request, response);
        if (status.ok()) {
          uint64_t seen = handled_.load();
          while (seen < response.handled_generation() &&
                 !handled_.compare_exchange_weak(seen, response.handled_generation())) {
          }
        }
        Count("Mount", status);
        break;
      }
      case 1: {
        v1::UnmountRequest request;
        request.set_epoch(epoch_);
        v1::UnmountResponse response;
        Count("Unmount", Send(stub, &v1::ShareManager::Stub::Unmount, request, response));
        break;
      }
      default: {
        v1::FilesystemTrimRequest request;
        request.set_epoch(epoch_);
        v1::FilesystemTrimResponse response;
        Count("FilesystemTrim",
              Send(stub, &v1::ShareManager::Stub::FilesystemTrim, request, response));
        break;
      }
    }
  }

  void Count(const std::string& method, const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    ++tally_[{method, status.error_code(), status.error_message()}];
  }

  const uint64_t epoch_;
  std::atomic<uint64_t> handled_{0};
  std::vector<std::unique_ptr<v1::ShareManager::Stub>> stubs_;
  mutable absl::Mutex mu_;
  Tally tally_ ABSL_GUARDED_BY(mu_);
  std::vector<std::jthread> threads_;  // last: they stop and join before the rest goes
};

uint16_t PortOf(const std::string& host_port) {
  return static_cast<uint16_t>(std::stoi(host_port.substr(host_port.rfind(':') + 1)));
}

}  // namespace

TEST_CASE(
    "a connection flood on the health port: the descriptors never run out, ganesha is never "
    "touched, the port answers throughout and after") {
  // Fewer descriptors than the flood has connections.
  auto started = DaemonProcess::Start({.extra_flags = {"--probe-interval", "100ms"},
                                       .wrapper = {"prlimit", "--nofile=256:256", "--"}});
  REQUIRE_MESSAGE(started.ok(), started.status().ToString());
  auto& d = *started;
  // A connection to the API port opened before the flood answers through it.
  const auto api = d->Stub();
  auto status = [&] {
    grpc::ClientContext context;
    context.set_deadline(In(milliseconds(3000)));
    v1::ShareStatus answer;
    const auto rpc = api->GetStatus(&context, {}, &answer);
    REQUIRE_MESSAGE(rpc.ok(), rpc.error_message());
    return answer;
  };
  const auto before = status();
  REQUIRE(before.ganesha_pid() > 0);
  auto health_port_serving = [&] {
    auto stub = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(d->health_addr(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(In(milliseconds(2000)));
    grpc::health::v1::HealthCheckRequest request;
    request.set_service("liveness");
    grpc::health::v1::HealthCheckResponse response;
    return stub->Check(&context, request, &response).ok() &&
           response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  };

  ConnectionFlood flood(PortOf(d->health_addr()), 400);
  // Thirty probe intervals of flood (three missed probes would mean "hung").
  CHECK_MESSAGE(testing_support::HoldsFor(
                    [&] {
                      const auto now = status();
                      return now.ganesha_pid() == before.ganesha_pid() &&
                             now.restart_count() == 0 && now.state() == v1::SERVING;
                    },
                    milliseconds(3000)),
                d->output());
  // The cap held the flood: its newest connections were refused.
  CHECK(absl::StrContains(d->output(), "health port: refused a connection from 127.0.0.1"));
  // A probe from the flood's own address gets in mid-flood: the flood's
  // connections have been open a second, the oldest makes room.
  CHECK(health_port_serving());
  flood.Close();
  // After it: as soon as gRPC has closed the flood's ended connections (they
  // count against the flood's address until then), not necessarily at once.
  CHECK(testing_support::WaitFor(health_port_serving, milliseconds(10'000)));
  CHECK(status().ganesha_pid() == before.ganesha_pid());
  CHECK_FALSE(absl::StrContains(d->output(), "NFS NULL probe missed"));
  CHECK_FALSE(absl::StrContains(d->output(), "Too many open files"));
}

TEST_CASE(
    "1,000 WatchStatus streams: the cap's worth stay open, the rest are refused "
    "RESOURCE_EXHAUSTED, health and GetStatus answer throughout") {
  auto d = StartDaemon({"--max-watch-streams", "64"});
  StreamFlood flood(d->addr(), 1000, 10);
  REQUIRE(flood.Settle(milliseconds(30'000)));
  CHECK(flood.accepted() >= 1);
  CHECK(flood.accepted() <= 64);
  CHECK(flood.accepted() + flood.refused().size() == 1000);
  for (const auto& status : flood.refused()) {
    CHECK_MESSAGE(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED,
                  status.error_message());
  }
  // With the accepted streams still open: health and reads within their deadlines.
  CHECK(RequireOk(d->HealthServing("readiness", milliseconds(2000))));
  CHECK(RequireOk(d->HealthServing("liveness", milliseconds(2000))));
  CHECK(RequireOk(d->Status(milliseconds(2000))).state() == v1::SERVING);
  // A change still goes through: the streams do not take the changes' slots.
  grpc::ClientContext context;
  context.set_deadline(In(milliseconds(10'000)));
  v1::MountRequest mount;
  v1::MountResponse mounted;
  const auto status = d->Stub()->Mount(&context, mount, &mounted);
  CHECK_MESSAGE(status.ok(), status.error_message());
  CHECK(d->WriteEventually("/after-flood.txt", "still serving").ok());
}

TEST_CASE(
    "one connection asking for more WatchStatus streams than the server's 128 per connection: "
    "128 are served, the rest wait in the client until streams end") {
  auto d = StartDaemon({"--max-watch-streams", "1000"});
  StreamFlood flood(d->addr(), 200, 1);
  REQUIRE(flood.RunUntil([&] { return flood.accepted() == 128; }, milliseconds(20'000)));
  // HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS: gRPC's client holds the other 72
  // back rather than send them (nothing is refused, nothing more is served).
  CHECK_FALSE(flood.RunUntil([&] { return flood.accepted() > 128 || !flood.refused().empty(); },
                             milliseconds(1000)));
  CHECK(RequireOk(d->HealthServing("liveness", milliseconds(2000))));
  // Each stream that ends lets one waiting stream in.
  flood.CancelAccepted(10);
  CHECK(flood.RunUntil([&] { return flood.accepted() == 138; }, milliseconds(10'000)));
  CHECK(flood.refused().empty());
}

TEST_CASE(
    "a flood of changes and reads over several connections: the changes beyond the cap are "
    "refused RESOURCE_EXHAUSTED, health answers SERVING within the probe timeout throughout, "
    "ganesha is untouched and NFS serves after") {
  constexpr uint64_t kEpoch = 7;
  auto d = StartDaemon({"--epoch", "7", "--max-changes", "2", "--max-watch-streams", "4"});
  const auto before = RequireOk(d->Status());
  REQUIRE(before.ganesha_pid() > 0);
  HealthWatch health(d->health_addr(), d->addr());
  {
    // The changers alone are six times --max-changes; with the readers the
    // calls outnumber the server's handler threads (4 + 2 + 16).
    CallFlood flood(d->addr(), /*connections=*/4, /*changers=*/12, /*readers=*/24, kEpoch);
    // Forty health rounds of flood (about four seconds); the bound only catches a hang.
    const int start = health.rounds();
    REQUIRE(testing_support::WaitFor([&] { return health.rounds() >= start + 40; },
                                     milliseconds(25'000)));
    flood.Stop();
    const std::map<std::string, std::set<grpc::StatusCode>> acceptable = {
        {"Mount", {grpc::StatusCode::OK, grpc::StatusCode::RESOURCE_EXHAUSTED}},
        {"Unmount", {grpc::StatusCode::OK, grpc::StatusCode::RESOURCE_EXHAUSTED}},
        // A directory export has no device: an admitted trim is UNIMPLEMENTED.
        {"FilesystemTrim", {grpc::StatusCode::UNIMPLEMENTED, grpc::StatusCode::RESOURCE_EXHAUSTED}},
        // Refused by the handler threads' quota when none is free.
        {"GetStatus", {grpc::StatusCode::OK, grpc::StatusCode::RESOURCE_EXHAUSTED}}};
    std::map<std::string, int> ok;
    int refused_by_changes_cap = 0;
    for (const auto& [call, count] : flood.tally()) {
      const auto& [method, code, message] = call;
      MESSAGE(method, " code ", code, " x", count, ": ", message);
      // The flooding client's own connection failing (once seen in CI, with
      // other tests and a build on the 2 cores: a channel in backoff fails
      // its calls at once) is the client's trouble, not an answer: what the
      // server must do is checked by the health watch and after the flood.
      if (code == grpc::StatusCode::UNAVAILABLE &&
          absl::StrContains(message, "failed to connect to all addresses")) {
        continue;
      }
      CHECK_MESSAGE(acceptable.at(method).contains(code), method, " code ", code, ": ", message);
      if (code == grpc::StatusCode::OK) ok[method] += count;
      if (code == grpc::StatusCode::RESOURCE_EXHAUSTED &&
          absl::StrContains(message, "2 changes are already in progress")) {
        refused_by_changes_cap += count;
      }
    }
    CHECK(refused_by_changes_cap > 0);
    // The flood did get through as well.
    CHECK(ok["Mount"] > 0);
    CHECK(ok["Unmount"] > 0);
    CHECK(ok["GetStatus"] > 0);
  }
  // The flood may have ended on an Unmount: export again (one more generation).
  grpc::ClientContext context;
  context.set_deadline(In(milliseconds(10'000)));
  v1::MountRequest mount;
  mount.set_epoch(kEpoch);
  v1::MountResponse mounted;
  const auto status = d->Stub()->Mount(&context, mount, &mounted);
  // On failure the log says what became of ganesha (hang kills, restarts, FAILED).
  REQUIRE_MESSAGE(status.ok(), status.error_message(), "\n", d->output());
  const auto after = RequireOk(d->WaitServing());
  CHECK_MESSAGE(after.ganesha_pid() == before.ganesha_pid(), d->output());
  CHECK(after.restart_count() == 0);
  CHECK(d->WriteEventually("/after-call-flood.txt", "still serving").ok());
  CHECK(RequireOk(d->ReadEventually("/after-call-flood.txt")) == "still serving");
  CHECK_MESSAGE(health.outages().empty(), absl::StrJoin(health.failures(), "\n"));
  if (!health.failures().empty())
    MESSAGE("late or failed probes: ", absl::StrJoin(health.failures(), "\n"));
}

TEST_CASE("the daemon raises its open-file soft limit to the hard one, and logs it") {
  auto d = DaemonProcess::Start({.wrapper = {"prlimit", "--nofile=512:4096", "--"}});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  const auto limits = base::ReadFile(absl::StrCat("/proc/", (*d)->pid(), "/limits"));
  REQUIRE(limits.ok());
  CHECK_MESSAGE(absl::StrContains(*limits, "Max open files            4096                 4096"),
                *limits);
  CHECK(absl::StrContains((*d)->output(), "open file limit: 4096"));
}

TEST_CASE("a request larger than the message cap is refused, the share-manager serves on") {
  auto d = StartDaemon();
  v1::GetStatusRequest request;
  // An unknown field: the server must read it all before it can parse anything.
  request.GetReflection()->MutableUnknownFields(&request)->AddLengthDelimited(
      1000, std::string(200 * 1024, 'x'));
  grpc::ClientContext context;
  context.set_deadline(In(milliseconds(5000)));
  v1::ShareStatus response;
  const auto status = d->Stub()->GetStatus(&context, request, &response);
  CHECK(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(RequireOk(d->Status()).state() == v1::SERVING);
}

TEST_CASE("Longhorn's unfenced ShareManagerService is served only with --longhorn-compat") {
  auto plain = StartDaemon({"--epoch", "3"});
  auto longhorn = ShareManagerService::NewStub(
      grpc::CreateChannel(plain->addr(), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    context.set_deadline(In(milliseconds(5000)));
    google::protobuf::Empty response;
    const auto status = longhorn->Unmount(&context, google::protobuf::Empty(), &response);
    CHECK(status.error_code() == grpc::StatusCode::UNIMPLEMENTED);
  }
  CHECK(RequireOk(plain->Status()).exported());  // nothing was withdrawn

  // With the flag, and the acknowledgement that they pass the fence, its calls
  // act on a fenced share-manager without an epoch.
  auto compat =
      StartDaemon({"--epoch", "3", "--longhorn-compat", "--longhorn-compat-bypasses-epoch"});
  longhorn = ShareManagerService::NewStub(
      grpc::CreateChannel(compat->addr(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(In(milliseconds(10'000)));
  google::protobuf::Empty response;
  const auto status = longhorn->Unmount(&context, google::protobuf::Empty(), &response);
  CHECK_MESSAGE(status.ok(), status.error_message());
  CHECK_FALSE(RequireOk(compat->Status()).exported());
}

TEST_CASE(
    "an unfenced share-manager refuses a change that carries an epoch, saying so, with nothing "
    "changed") {
  auto d = StartDaemon();  // no --epoch: unfenced
  grpc::ClientContext context;
  context.set_deadline(In(milliseconds(5000)));
  v1::UnmountRequest unmount;
  unmount.set_epoch(4);  // a controller that believes it started this server at epoch 4
  v1::UnmountResponse response;
  const auto status = d->Stub()->Unmount(&context, unmount, &response);
  CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_MESSAGE(status.error_message().find("carries epoch 4") != std::string::npos,
                status.error_message());
  CHECK_MESSAGE(status.error_message().find("unfenced (epoch 0") != std::string::npos,
                status.error_message());
  CHECK(RequireOk(d->Status()).exported());
  CHECK(d->WriteEventually("/still.txt", "exported").ok());
}

TEST_CASE("a fenced share-manager refuses a change that carries no epoch, with nothing changed") {
  auto d = StartDaemon({"--epoch", "5"});
  grpc::ClientContext context;
  context.set_deadline(In(milliseconds(5000)));
  v1::UnmountRequest unmount;  // epoch 0: unset
  v1::UnmountResponse response;
  const auto status = d->Stub()->Unmount(&context, unmount, &response);
  CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(status.error_message().find("fenced at epoch 5") != std::string::npos);
  CHECK(RequireOk(d->Status()).exported());
  CHECK(d->WriteEventually("/still.txt", "exported").ok());
}

TEST_CASE("the unix socket is created 0600, or 0660 with --socket-group, and serves the API") {
  const testing_support::TempDir dir;  // 0700, like /run/share-manager
  const std::string socket = dir.path() + "/sm.sock";
  {
    auto d = StartDaemon({"--socket", socket});
    struct stat st {};
    REQUIRE(stat(socket.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    const auto status = RunCommand({ShareManagerBinary(), "status", "--addr", socket});
    CHECK_MESSAGE(status.exit_code == 0, status.output);
  }
  auto d = StartDaemon({"--socket", socket, "--socket-group", "adm"});
  struct stat st {};
  REQUIRE(stat(socket.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0660);
  CHECK(st.st_gid == 4);
}

TEST_CASE("a unix socket in a world-writable directory is refused: exit 4, nothing served") {
  const testing_support::TempDir dir;
  REQUIRE(chmod(dir.path().c_str(), 01777) == 0);
  auto d = DaemonProcess::Start(
      {.extra_flags = {"--socket", dir.path() + "/sm.sock"}, .wait_until_serving = false});
  REQUIRE_MESSAGE(d.ok(), d.status().ToString());
  CHECK(RequireOk((*d)->WaitExit(milliseconds(10'000))) == 4);
  CHECK((*d)->output().find("world-writable") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/sm.sock"));
}
