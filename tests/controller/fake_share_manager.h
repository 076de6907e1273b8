// A share-manager stand-in for connector tests: serves one fixed status over
// real gRPC on a loopback port, observed through GrpcShareConnector.
#pragma once

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>

#include "controller/grpc_share_connector.h"
#include "sharemanager/v1/sharemanager.grpc.pb.h"

namespace controller {

class FixedShareManager final : public sharemanager::v1::ShareManager::Service {
 public:
  explicit FixedShareManager(sharemanager::v1::ShareStatus status) : status_(std::move(status)) {}
  grpc::Status GetStatus(grpc::ServerContext*, const sharemanager::v1::GetStatusRequest*,
                         sharemanager::v1::ShareStatus* out) override {
    *out = status_;
    return grpc::Status::OK;
  }

 private:
  sharemanager::v1::ShareStatus status_;
};

// What GrpcShareConnector observes of `base` (its endpoint replaced) when a
// share-manager answers with `status`.
inline ShareObservation ObserveWith(const sharemanager::v1::ShareStatus& status, const Pod& base) {
  FixedShareManager service(status);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  const auto server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  Pod pod = base;
  pod.endpoint = "127.0.0.1:" + std::to_string(port);
  GrpcShareConnector connector({.deadline = std::chrono::milliseconds(2000)});
  auto seen = connector.Observe(pod);
  server->Shutdown();
  return seen;
}

}  // namespace controller
