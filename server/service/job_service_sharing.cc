// JobService: the methods of sharing the fleet. CheckpointJob waits for the ranks'
// checkpoint (the manager finishes the call from the thread that commits it);
// CordonWorker and DrainWorker are the admin's.
#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "common/grpc_status.h"
#include "server/policy/request_validation.h"
#include "server/service/job_service.h"
#include "server/service/unary_call.h"

namespace trainyard {
namespace {

// A CheckpointJob waiting for its checkpoint. The manager finishes it exactly once;
// OnCancel only flags that the client went away, so the manager drops its wait at its
// next tick (answering CANCELLED) instead of holding it to the deadline.
class CheckpointReactor : public grpc::ServerUnaryReactor {
 public:
  std::shared_ptr<std::atomic<bool>> gone() const { return gone_; }
  void OnCancel() override { gone_->store(true); }
  void OnDone() override { delete this; }

 private:
  const std::shared_ptr<std::atomic<bool>> gone_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

grpc::ServerUnaryReactor* JobServiceImpl::CheckpointJob(grpc::CallbackServerContext* ctx,
                                                        const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  auto caller = authorizer_->Authenticate(*ctx);
  if (!caller.ok()) return Done(ctx, caller.status());
  v1::CheckpointJobRequest request;
  if (auto s = ParseRequest(*in, &request); !s.ok()) return Done(ctx, s);
  auto* reactor = new CheckpointReactor();
  // `out` lives until the call is done, which is after Finish; the actions call back
  // exactly once (refused, answered, failed, timed out, aborted, cancelled or stopping).
  actions_->Checkpoint(*caller, Via::kGrpc, request, reactor->gone(),
                       [reactor, out](absl::StatusOr<v1::CheckpointRef> ref) {
                         absl::Status status = ref.status();
                         if (ref.ok()) {
                           v1::CheckpointJobResponse response;
                           *response.mutable_checkpoint() = std::move(*ref);
                           status = SerializeResponse(response, out);
                         }
                         reactor->Finish(ToGrpcStatus(status));
                       });
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::CordonWorker(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                       grpc::ByteBuffer* out) {
  return Serve<v1::CordonWorkerRequest, v1::WorkerInfo>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::CordonWorkerRequest& request, v1::WorkerInfo* response) {
        TY_ASSIGN_OR_RETURN(*response, actions_->Cordon(caller, Via::kGrpc, request));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::DrainWorker(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return Serve<v1::DrainWorkerRequest, v1::DrainWorkerResponse>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::DrainWorkerRequest& request, v1::DrainWorkerResponse* response) {
        TY_ASSIGN_OR_RETURN(*response, actions_->Drain(caller, Via::kGrpc, request));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::ListAudit(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                    grpc::ByteBuffer* out) {
  return Serve<v1::ListAuditRequest, v1::ListAuditResponse>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::ListAuditRequest& request, v1::ListAuditResponse* response) {
        TY_ASSIGN_OR_RETURN(auto rows, actions_->ListAudit(caller, request));
        for (auto& row : rows) *response->add_records() = std::move(row);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::GetWebhookStatus(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return Serve<v1::GetWebhookStatusRequest, v1::GetWebhookStatusResponse>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::GetWebhookStatusRequest&, v1::GetWebhookStatusResponse* response) {
        if (!Authorizer::CanManageFleet(caller)) return Denied(caller, "read webhook status", "admin");
        if (!webhook_status_) {
          response->set_configured(false);
          return absl::OkStatus();
        }
        TY_ASSIGN_OR_RETURN(*response, webhook_status_());
        return absl::OkStatus();
      });
}

}  // namespace trainyard
