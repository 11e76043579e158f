#include "server/metrics/grpc_metrics.h"

#include <string>

#include "absl/time/clock.h"

namespace trainyard {
namespace {

using grpc::experimental::InterceptionHookPoints;

// One per call: counts the start when the call's metadata arrives and the status code
// (and, for a unary call, the time since the start) when the status is sent.
class GrpcMetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  GrpcMetricsInterceptor(ControllerMetrics* metrics, grpc::experimental::ServerRpcInfo* info)
      : metrics_(metrics),
        method_(info->method() != nullptr ? info->method() : ""),
        unary_(info->type() == grpc::experimental::ServerRpcInfo::Type::UNARY) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      started_ = absl::Now();
      metrics_->GrpcStarted(method_);
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      metrics_->GrpcHandled(method_, static_cast<int>(methods->GetSendStatus().error_code()), unary_,
                            absl::Now() - started_);
    }
    methods->Proceed();
  }

 private:
  ControllerMetrics* const metrics_;
  const std::string method_;
  const bool unary_;
  absl::Time started_ = absl::Now();
};

}  // namespace

grpc::experimental::Interceptor* GrpcMetricsInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  return new GrpcMetricsInterceptor(metrics_, info);
}

}  // namespace trainyard
