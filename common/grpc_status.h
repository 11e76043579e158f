#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace trainyard {

// The one place where absl::Status and grpc::Status convert; codes map one to one.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace trainyard
