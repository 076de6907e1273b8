// The health port's service over a real (in-process) gRPC server: Check
// answers as gRPC's default service would, Watch is refused.
#include "sharemgr/health_check_only_service.h"

#include <doctest/doctest.h>
#include <grpcpp/ext/health_check_service_server_builder_option.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace sharemgr {
namespace {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class Served {
 public:
  Served() {
    grpc::ServerBuilder builder;
    // As the daemon builds the health port: without gRPC's default service.
    builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(nullptr));
    builder.RegisterService(&service);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
    stub_ = grpc::health::v1::Health::NewStub(server_->InProcessChannel({}));
  }
  ~Served() { server_->Shutdown(); }

  // SERVING, NOT_SERVING, or the call's error code.
  std::string Check(const std::string& name) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    HealthCheckRequest request;
    request.set_service(name);
    HealthCheckResponse response;
    const auto status = stub_->Check(&context, request, &response);
    if (!status.ok()) return absl::StrCat("error ", status.error_code());
    return HealthCheckResponse::ServingStatus_Name(response.status());
  }

  grpc::health::v1::Health::Stub& stub() { return *stub_; }

  HealthCheckOnlyService service;

 private:
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
};

}  // namespace

TEST_CASE("the health port's service: Check as gRPC's default service answers, Watch refused") {
  Served s;
  CHECK(s.Check("") == "SERVING");
  CHECK(s.Check("readiness") == absl::StrCat("error ", grpc::StatusCode::NOT_FOUND));
  s.service.SetServingStatus("readiness", false);
  s.service.SetServingStatus("liveness", true);
  CHECK(s.Check("readiness") == "NOT_SERVING");
  CHECK(s.Check("liveness") == "SERVING");
  s.service.SetServingStatus(true);
  CHECK(s.Check("readiness") == "SERVING");

  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    HealthCheckRequest request;
    request.set_service("liveness");
    auto watch = s.stub().Watch(&context, request);
    HealthCheckResponse response;
    CHECK_FALSE(watch->Read(&response));
    CHECK(watch->Finish().error_code() == grpc::StatusCode::UNIMPLEMENTED);
  }

  // Stopping: NOT_SERVING for good, whatever is set afterwards.
  s.service.Shutdown();
  CHECK(s.Check("") == "NOT_SERVING");
  CHECK(s.Check("liveness") == "NOT_SERVING");
  s.service.SetServingStatus("liveness", true);
  s.service.SetServingStatus(true);
  CHECK(s.Check("liveness") == "NOT_SERVING");
}

}  // namespace sharemgr
