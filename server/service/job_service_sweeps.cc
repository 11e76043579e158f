// JobService: sweeps (job arrays). Each method authenticates, parses and hands the
// request to JobActions, which holds the rules (roles, visibility, audit) that the web
// API shares.
#include <utility>

#include "server/policy/request_validation.h"
#include "server/service/job_service.h"
#include "server/service/unary_call.h"

namespace trainyard {

grpc::ServerUnaryReactor* JobServiceImpl::SubmitSweep(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return Serve<v1::SubmitSweepRequest, v1::SweepView>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::SubmitSweepRequest& request, v1::SweepView* response) {
        auto view = actions_->SubmitSweep(caller, Via::kGrpc, request);
        if (view.ok()) *response = std::move(*view);
        return view.status();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::GetSweep(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                   grpc::ByteBuffer* out) {
  return Serve<v1::GetSweepRequest, v1::SweepView>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::GetSweepRequest& request, v1::SweepView* response) {
        auto view = actions_->GetSweep(caller, request.id());
        if (view.ok()) *response = std::move(*view);
        return view.status();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::ListSweeps(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                     grpc::ByteBuffer* out) {
  return Serve<v1::ListSweepsRequest, v1::ListSweepsResponse>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::ListSweepsRequest& request, v1::ListSweepsResponse* response) {
        if (auto s = request_validation::Check(request); !s.ok()) return s;
        for (auto& view : actions_->ListSweeps(caller, request.limit())) *response->add_sweeps() = std::move(view);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelSweep(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return Serve<v1::CancelSweepRequest, v1::SweepView>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::CancelSweepRequest& request, v1::SweepView* response) {
        auto view = actions_->CancelSweep(caller, Via::kGrpc, request);
        if (view.ok()) *response = std::move(*view);
        return view.status();
      });
}

}  // namespace trainyard
