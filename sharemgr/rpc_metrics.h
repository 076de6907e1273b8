// Counts and times every call the gRPC server answers, by method and status
// code, through a server interceptor: no handler carries any of it. A method
// the server does not have (a client may send any path) is counted as
// "other", so callers cannot grow the label set.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"

namespace sharemgr {

class RpcMetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // Called once per call, on the thread that sends its status (or that ends
  // it without one: counted as CANCELLED).
  using Record = std::function<void(const std::string& method, grpc::StatusCode code,
                                    base::Clock::duration took)>;

  // `methods`: "/package.Service/Method" paths counted under their own name.
  RpcMetricsInterceptorFactory(std::set<std::string> methods, Record record)
      : methods_(std::move(methods)), record_(std::move(record)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  const std::set<std::string> methods_;
  const Record record_;
};

// The label for calls to a method not in the set.
inline constexpr char kOtherMethod[] = "other";

// "/package.Service/Method" for every method of the named services, from the
// protobuf descriptors linked into this binary (a service not linked in
// contributes nothing).
std::set<std::string> ServiceMethods(const std::vector<std::string>& services);

}  // namespace sharemgr
