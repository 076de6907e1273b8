// The gRPC metrics interceptor on a real (in-process) server: every call is
// recorded once with its method and code, without any handler's help; a
// method the server does not have is "other".
#include "sharemgr/rpc_metrics.h"

#include <doctest/doctest.h>
#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <mutex>

#include "sharemgr/health_check_only_service.h"

namespace sharemgr {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

constexpr char kCheck[] = "/grpc.health.v1.Health/Check";
constexpr char kWatch[] = "/grpc.health.v1.Health/Watch";

class Recorded {
 public:
  void Add(const std::string& method, grpc::StatusCode code, base::Clock::duration took) {
    std::lock_guard lock(mu_);
    calls_.emplace_back(method, code);
    CHECK(took >= base::Clock::duration::zero());
  }
  std::vector<std::pair<std::string, grpc::StatusCode>> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<std::string, grpc::StatusCode>> calls_;
};

class Served {
 public:
  explicit Served(Recorded& recorded) {
    grpc::ServerBuilder builder;
    builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> counting;
    counting.push_back(std::make_unique<RpcMetricsInterceptorFactory>(
        ServiceMethods({"grpc.health.v1.Health"}),
        [&recorded](const std::string& method, grpc::StatusCode code, base::Clock::duration took) {
          recorded.Add(method, code, took);
        }));
    builder.experimental().SetInterceptorCreators(std::move(counting));
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
    channel_ = server_->InProcessChannel({});
  }
  ~Served() { server_->Shutdown(); }

  grpc::StatusCode Check(const std::string& name) {
    grpc::ClientContext context;
    HealthCheckRequest request;
    request.set_service(name);
    HealthCheckResponse response;
    return grpc::health::v1::Health::NewStub(channel_)
        ->Check(&context, request, &response)
        .error_code();
  }
  grpc::StatusCode Watch() {
    grpc::ClientContext context;
    auto reader = grpc::health::v1::Health::NewStub(channel_)->Watch(&context, {});
    HealthCheckResponse response;
    while (reader->Read(&response)) {
    }
    return reader->Finish().error_code();
  }
  // A call to a path the server does not serve, through the generic stub.
  grpc::StatusCode Unknown(const std::string& path) {
    grpc::GenericStub stub(channel_);
    grpc::ClientContext context;
    grpc::Slice empty("");
    grpc::ByteBuffer request(&empty, 1), response;
    grpc::Status status;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    stub.UnaryCall(&context, path, grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
      std::lock_guard lock(mu);
      status = std::move(s);
      done = true;
      cv.notify_all();
    });
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
    return status.error_code();
  }

 private:
  HealthCheckOnlyService service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace

TEST_CASE("rpc metrics: the methods of the named services, from the linked descriptors") {
  CHECK(ServiceMethods({"grpc.health.v1.Health"}) == std::set<std::string>{kCheck, kWatch});
  CHECK(ServiceMethods({"no.such.Service"}).empty());
  const auto ours = ServiceMethods({"sharemanager.v1.ShareManager"});
  CHECK(ours.count("/sharemanager.v1.ShareManager/GetStatus") == 1);
  CHECK(ours.count("/sharemanager.v1.ShareManager/WatchStatus") == 1);
}

TEST_CASE("rpc metrics: each call recorded once, with its method and the code it got") {
  Recorded recorded;
  {
    Served s(recorded);
    REQUIRE(s.Check("") == grpc::StatusCode::OK);
    REQUIRE(s.Check("") == grpc::StatusCode::OK);
    REQUIRE(s.Check("nobody") == grpc::StatusCode::NOT_FOUND);
    REQUIRE(s.Watch() == grpc::StatusCode::UNIMPLEMENTED);  // refused by the handler
    REQUIRE(s.Unknown("/grpc.health.v1.Health/Nope") == grpc::StatusCode::UNIMPLEMENTED);
    REQUIRE(s.Unknown("/made.up/Path") == grpc::StatusCode::UNIMPLEMENTED);
  }
  const auto calls = recorded.calls();
  const std::vector<std::pair<std::string, grpc::StatusCode>> expected = {
      {kCheck, grpc::StatusCode::OK},
      {kCheck, grpc::StatusCode::OK},
      {kCheck, grpc::StatusCode::NOT_FOUND},
      {kWatch, grpc::StatusCode::UNIMPLEMENTED},
      {kOtherMethod, grpc::StatusCode::UNIMPLEMENTED},
      {kOtherMethod, grpc::StatusCode::UNIMPLEMENTED}};
  CHECK(calls == expected);
}

}  // namespace sharemgr
