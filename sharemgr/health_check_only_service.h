// grpc.health.v1 for the plaintext health port: Check, and nothing that can
// last. gRPC's default health service also serves Watch, a stream anyone who
// reaches the port could hold open for as long as it likes; kubelet only ever
// calls Check, so Watch is refused here with UNIMPLEMENTED. It is fed like the
// default service (HealthPublisher calls SetServingStatus on both), so both
// ports always tell the same.
#pragma once

#include <grpcpp/health_check_service_interface.h>

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace sharemgr {

class HealthCheckOnlyService final : public grpc::health::v1::Health::Service,
                                     public grpc::HealthCheckServiceInterface {
 public:
  // As gRPC's default service: "" is SERVING until told otherwise; a name
  // never set is NOT_FOUND.
  HealthCheckOnlyService();

  // gRPC threads.
  grpc::Status Check(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override
      ABSL_LOCKS_EXCLUDED(mu_);
  grpc::Status Watch(grpc::ServerContext* context,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::ServerWriter<grpc::health::v1::HealthCheckResponse>* writer) override;

  // Any thread.
  void SetServingStatus(const std::string& service_name, bool serving) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void SetServingStatus(bool serving) override ABSL_LOCKS_EXCLUDED(mu_);
  // Every service NOT_SERVING from now on, whatever is set later (the server is stopping).
  void Shutdown() override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  std::map<std::string, bool> serving_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sharemgr
