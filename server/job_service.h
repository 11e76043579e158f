#pragma once

#include "server/artifact_store.h"
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
// Every method takes its request as raw bytes and parses it with ParseRequest, so a
// malformed request (invalid UTF-8 in a string field) is an INVALID_ARGUMENT naming the
// field rather than gRPC's empty UNIMPLEMENTED. The wire format is the typed one.
// ListArtifacts and PullArtifact read the ArtifactStore: NOT_FOUND for an unknown job or
// artifact; PullArtifact sends the ArtifactInfo first, then the bytes in messages of at
// most 256 KiB, one write in flight.
using JobServiceBase = v1::JobService::WithRawCallbackMethod_SubmitJob<
    v1::JobService::WithRawCallbackMethod_GetJob<v1::JobService::WithRawCallbackMethod_ListJobs<
        v1::JobService::WithRawCallbackMethod_CancelJob<v1::JobService::WithRawCallbackMethod_ResizeJob<
            v1::JobService::WithRawCallbackMethod_WatchJob<
                v1::JobService::WithRawCallbackMethod_ListWorkers<v1::JobService::WithRawCallbackMethod_ListArtifacts<
                    v1::JobService::WithRawCallbackMethod_PullArtifact<v1::JobService::Service>>>>>>>>>;

class JobServiceImpl final : public JobServiceBase {
 public:
  JobServiceImpl(JobManager* manager, StateStore* store, EventHub* hub, PreflightGate* preflight,
                 ArtifactStore* artifacts)
      : manager_(manager), store_(store), hub_(hub), preflight_(preflight), artifacts_(artifacts) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ResizeJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* ctx,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchJob(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* ListArtifacts(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* PullArtifact(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* request) override;

 private:
  JobManager* const manager_;
  StateStore* const store_;
  EventHub* const hub_;
  PreflightGate* const preflight_;
  ArtifactStore* const artifacts_;
};

}  // namespace trainyard
