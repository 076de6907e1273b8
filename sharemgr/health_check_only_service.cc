#include "sharemgr/health_check_only_service.h"

namespace sharemgr {

using grpc::health::v1::HealthCheckResponse;

HealthCheckOnlyService::HealthCheckOnlyService() { serving_[""] = true; }

grpc::Status HealthCheckOnlyService::Check(grpc::ServerContext*,
                                           const grpc::health::v1::HealthCheckRequest* request,
                                           HealthCheckResponse* response) {
  absl::MutexLock lock(&mu_);
  const auto it = serving_.find(request->service());
  if (it == serving_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service");
  response->set_status(it->second ? HealthCheckResponse::SERVING
                                  : HealthCheckResponse::NOT_SERVING);
  return grpc::Status::OK;
}

grpc::Status HealthCheckOnlyService::Watch(grpc::ServerContext*,
                                           const grpc::health::v1::HealthCheckRequest*,
                                           grpc::ServerWriter<HealthCheckResponse>*) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "the health port answers Check only; Watch is served on the API port");
}

void HealthCheckOnlyService::SetServingStatus(const std::string& service_name, bool serving) {
  absl::MutexLock lock(&mu_);
  serving_[service_name] = serving && !shut_down_;
}

void HealthCheckOnlyService::SetServingStatus(bool serving) {
  absl::MutexLock lock(&mu_);
  for (auto& [name, value] : serving_) value = serving && !shut_down_;
}

void HealthCheckOnlyService::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  for (auto& [name, value] : serving_) value = false;
}

}  // namespace sharemgr
