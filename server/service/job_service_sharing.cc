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
  if (auto s = request_validation::Check(request); !s.ok()) return Done(ctx, s);
  if (caller->role == Role::kViewer) return Done(ctx, Denied(*caller, "checkpoint jobs", "submitter or admin"));
  auto visible = VisibleJob(*caller, request.job_id());
  if (!visible.ok()) return Done(ctx, visible.status());
  if (!Authorizer::CanCancel(*caller, visible->owner())) {
    return Done(ctx, Denied(*caller, "checkpoint this job", "its owner or admin"));
  }
  const double timeout_s =
      request.timeout_s() > 0 ? request.timeout_s() : request_validation::kDefaultCheckpointTimeoutS;
  auto* reactor = new CheckpointReactor();
  // `out` lives until the call is done, which is after Finish; the manager calls back
  // exactly once (answered, failed, timed out, aborted, cancelled or stopping).
  manager_->RequestCheckpoint(
      request.job_id(), absl::Seconds(timeout_s),
      [reactor, out](absl::StatusOr<v1::CheckpointRef> ref) {
        absl::Status status = ref.status();
        if (ref.ok()) {
          v1::CheckpointJobResponse response;
          *response.mutable_checkpoint() = std::move(*ref);
          status = SerializeResponse(response, out);
        }
        reactor->Finish(ToGrpcStatus(status));
      },
      reactor->gone());
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::CordonWorker(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                       grpc::ByteBuffer* out) {
  return Serve<v1::CordonWorkerRequest, v1::WorkerInfo>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::CordonWorkerRequest& request, v1::WorkerInfo* response) {
        TY_RETURN_IF_ERROR(request_validation::Check(request));
        if (!Authorizer::CanManageFleet(caller)) {
          return Denied(caller, request.cordon() ? "cordon workers" : "uncordon workers", "admin");
        }
        TY_ASSIGN_OR_RETURN(*response, manager_->Cordon(request.name(), request.cordon(), request.reason()));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* JobServiceImpl::DrainWorker(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return Serve<v1::DrainWorkerRequest, v1::DrainWorkerResponse>(
      ctx, *authorizer_, in, out,
      [this](const Caller& caller, const v1::DrainWorkerRequest& request, v1::DrainWorkerResponse* response) {
        TY_RETURN_IF_ERROR(request_validation::Check(request));
        if (!Authorizer::CanManageFleet(caller)) return Denied(caller, "drain workers", "admin");
        TY_ASSIGN_OR_RETURN(*response, manager_->Drain(request.name(), request.reason()));
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
