// The one place where absl::Status becomes grpc::Status.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace sharemgr {

grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace sharemgr
