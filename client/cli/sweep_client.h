// The sweep RPCs of JobService (SubmitSweep, GetSweep, ListSweeps, CancelSweep) and
// ListJobs with without_sweep_children, for the CLI. JobClient (client/job_client.h)
// has no sweep calls yet; this sits on the same channel, with the same deadline and
// bearer token, so the CLI's connection settings apply to both.
#pragma once

#include <grpcpp/channel.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainyard/v1/job_service.grpc.pb.h"

namespace trainyard::cli {

// Thread-safe: calls may run concurrently.
class SweepClient {
 public:
  SweepClient(std::shared_ptr<grpc::ChannelInterface> channel, std::chrono::milliseconds timeout,
              std::string bearer_token = "");

  absl::StatusOr<v1::SweepView> SubmitSweep(const v1::SubmitSweepRequest& request);
  absl::StatusOr<v1::SweepView> GetSweep(const std::string& id);
  // `limit` 0: the controller's default (100), newest first; children left out.
  absl::StatusOr<std::vector<v1::SweepView>> ListSweeps(int limit);
  absl::StatusOr<v1::SweepView> CancelSweep(const std::string& id, const std::string& reason);
  // JobClient::ListJobs with ListJobsRequest.without_sweep_children.
  absl::StatusOr<std::vector<v1::Job>> ListJobs(const std::vector<v1::Job::State>& states, int limit,
                                                bool without_sweep_children);

 private:
  void Prepare(grpc::ClientContext* context) const;  // deadline and token

  std::unique_ptr<v1::JobService::StubInterface> stub_;
  const std::chrono::milliseconds timeout_;
  const std::string bearer_token_;
};

}  // namespace trainyard::cli
