// A share-manager stand-in for connector tests: serves one fixed status over
// real gRPC on a loopback port, observed through GrpcShareConnector, and
// counts the Mount calls that reach it.
#pragma once

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "controller/runtime/grpc_share_connector.h"
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
  grpc::Status Mount(grpc::ServerContext*, const sharemanager::v1::MountRequest* request,
                     sharemanager::v1::MountResponse* out) override {
    ++mounts_;
    out->set_handled_generation(request->generation());
    return grpc::Status::OK;
  }
  int mounts() const { return mounts_; }

 private:
  sharemanager::v1::ShareStatus status_;
  std::atomic<int> mounts_{0};
};

// A FixedShareManager listening on a free loopback port while this lives.
class FixedServer {
 public:
  explicit FixedServer(const sharemanager::v1::ShareStatus& status) : service_(status) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
  }
  ~FixedServer() { server_->Shutdown(); }
  FixedServer(const FixedServer&) = delete;
  FixedServer& operator=(const FixedServer&) = delete;

  // `base` with its endpoint pointing here.
  Pod At(Pod base) const {
    base.endpoint = "127.0.0.1:" + std::to_string(port_);
    return base;
  }
  const FixedShareManager& service() const { return service_; }

 private:
  FixedShareManager service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// What GrpcShareConnector observes of `base` (its endpoint replaced) when a
// share-manager answers with `status`.
inline ShareObservation ObserveWith(const sharemanager::v1::ShareStatus& status, const Pod& base) {
  FixedServer server(status);
  GrpcShareConnector connector({.deadline = std::chrono::milliseconds(2000)});
  return connector.Observe(server.At(base));
}

}  // namespace controller
