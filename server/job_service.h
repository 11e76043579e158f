#pragma once

#include "server/event_hub.h"
#include "server/job_manager.h"
#include "server/preflight_gate.h"
#include "server/state_store.h"
#include "trainyard/v1/job_service.grpc.pb.h"

namespace trainyard {

// Thin gRPC adapter for JobService: parses, calls JobManager, converts the Status.
// WatchJob streams committed events from the store, so a slow watcher never stalls
// ingestion. A SubmitJob whose spec sets compile.preflight is validated, then handed
// to the PreflightGate; the gate's thread creates the job (or not) and finishes the
// call.
class JobServiceImpl final : public v1::JobService::CallbackService {
 public:
  JobServiceImpl(JobManager* manager, StateStore* store, EventHub* hub, PreflightGate* preflight)
      : manager_(manager), store_(store), hub_(hub), preflight_(preflight) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest* request,
                                      v1::Job* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const v1::GetJobRequest* request, v1::Job* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* request,
                                     v1::ListJobsResponse* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const v1::CancelJobRequest* request,
                                      v1::Job* response) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* ctx,
                                        const v1::ListWorkersRequest* request,
                                        v1::ListWorkersResponse* response) override;
  grpc::ServerWriteReactor<v1::Event>* WatchJob(grpc::CallbackServerContext* ctx,
                                                const v1::WatchJobRequest* request) override;

 private:
  JobManager* const manager_;
  StateStore* const store_;
  EventHub* const hub_;
  PreflightGate* const preflight_;
};

}  // namespace trainyard
