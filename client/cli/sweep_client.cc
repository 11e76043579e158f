#include "client/cli/sweep_client.h"

#include <grpcpp/client_context.h>

#include <utility>

#include "common/grpc_status.h"

namespace trainyard::cli {

SweepClient::SweepClient(std::shared_ptr<grpc::ChannelInterface> channel, std::chrono::milliseconds timeout,
                         std::string bearer_token)
    : stub_(v1::JobService::NewStub(std::move(channel))), timeout_(timeout), bearer_token_(std::move(bearer_token)) {}

void SweepClient::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() + timeout_);
  if (!bearer_token_.empty()) context->AddMetadata("authorization", "Bearer " + bearer_token_);
}

absl::StatusOr<v1::SweepView> SweepClient::SubmitSweep(const v1::SubmitSweepRequest& request) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::SweepView view;
  grpc::Status status = stub_->SubmitSweep(&context, request, &view);
  if (!status.ok()) return FromGrpcStatus(status);
  return view;
}

absl::StatusOr<v1::SweepView> SweepClient::GetSweep(const std::string& id) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetSweepRequest request;
  request.set_id(id);
  v1::SweepView view;
  grpc::Status status = stub_->GetSweep(&context, request, &view);
  if (!status.ok()) return FromGrpcStatus(status);
  return view;
}

absl::StatusOr<std::vector<v1::SweepView>> SweepClient::ListSweeps(int limit) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ListSweepsRequest request;
  request.set_limit(limit);
  v1::ListSweepsResponse response;
  grpc::Status status = stub_->ListSweeps(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<v1::SweepView>(response.sweeps().begin(), response.sweeps().end());
}

absl::StatusOr<v1::SweepView> SweepClient::CancelSweep(const std::string& id, const std::string& reason) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::CancelSweepRequest request;
  request.set_id(id);
  request.set_reason(reason);
  v1::SweepView view;
  grpc::Status status = stub_->CancelSweep(&context, request, &view);
  if (!status.ok()) return FromGrpcStatus(status);
  return view;
}

absl::StatusOr<std::vector<v1::Job>> SweepClient::ListJobs(const std::vector<v1::Job::State>& states, int limit,
                                                           bool without_sweep_children) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ListJobsRequest request;
  for (v1::Job::State state : states) request.add_states(state);
  request.set_limit(limit);
  request.set_without_sweep_children(without_sweep_children);
  v1::ListJobsResponse response;
  grpc::Status status = stub_->ListJobs(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<v1::Job>(response.jobs().begin(), response.jobs().end());
}

}  // namespace trainyard::cli
