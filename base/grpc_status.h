// The one place where absl::Status and grpc::Status are converted.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace base {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace base
