// gRPC server request metrics (trainyard_grpc_server_{started,handled}_total and
// trainyard_grpc_server_handling_seconds) from a server interceptor, so every service,
// ours and the health service, is counted without code in each handler.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include "server/metrics/controller_metrics.h"

namespace trainyard {

class GrpcMetricsInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit GrpcMetricsInterceptorFactory(ControllerMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override;

 private:
  ControllerMetrics* const metrics_;
};

}  // namespace trainyard
