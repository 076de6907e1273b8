#include "sharemgr/rpc_metrics.h"

#include <google/protobuf/descriptor.h>

#include "absl/strings/str_cat.h"

namespace sharemgr {
namespace {

using grpc::experimental::InterceptionHookPoints;

// One per call; gRPC creates it as the call starts and destroys it with the call.
class RpcMetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(std::string method, const RpcMetricsInterceptorFactory::Record& record)
      : method_(std::move(method)), record_(record), started_(base::Clock::now()) {}
  // A call that ends without sending a status (its client went away, the
  // server stopped) still counts.
  ~RpcMetricsInterceptor() override {
    if (!recorded_) Record(grpc::StatusCode::CANCELLED);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      Record(methods->GetSendStatus().error_code());
    }
    methods->Proceed();
  }

 private:
  void Record(grpc::StatusCode code) {
    recorded_ = true;
    record_(method_, code, base::Clock::now() - started_);
  }

  const std::string method_;
  const RpcMetricsInterceptorFactory::Record& record_;
  const base::TimePoint started_;
  bool recorded_ = false;
};

}  // namespace

grpc::experimental::Interceptor* RpcMetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const char* method = info->method();
  const bool known = method != nullptr && methods_.count(method) > 0;
  return new RpcMetricsInterceptor(known ? method : kOtherMethod, record_);
}

std::set<std::string> ServiceMethods(const std::vector<std::string>& services) {
  std::set<std::string> methods;
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const std::string& name : services) {
    const google::protobuf::ServiceDescriptor* service = pool->FindServiceByName(name);
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) {
      methods.insert(absl::StrCat("/", service->full_name(), "/", service->method(i)->name()));
    }
  }
  return methods;
}

}  // namespace sharemgr
