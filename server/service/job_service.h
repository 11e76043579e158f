#pragma once

#include <functional>
#include <memory>

#include "server/service/job_actions.h"
#include "server/service/watch_reactor.h"
#include "server/state/artifact_store.h"
#include "server/auth/authorizer.h"
#include "server/auth/watcher_cap.h"
#include "server/state/event_hub.h"
#include "server/state/job_manager.h"
#include "server/state/preflight_gate.h"
#include "server/store/job_store.h"
#include "trainyard/v1/job_service.grpc.pb.h"

namespace trainyard {

struct JobServiceOptions {
  // Who may call what (server/auth/authorizer.h). Null: authorization off, every caller
  // an admin whose owner is "local" (Authorizer::Disabled()). Must outlive the service.
  const Authorizer* authorizer = nullptr;
  // Concurrent watch streams (WatchJob, WatchJobBatched) per identity (owner); beyond, RESOURCE_EXHAUSTED.
  int max_watchers_per_owner = WatcherCap::kDefaultPerOwner;
  // GetWebhookStatus's answer (server/notify/webhook_manager.h); empty: the controller
  // runs without --webhooks and answers configured = false.
  std::function<absl::StatusOr<v1::GetWebhookStatusResponse>()> webhook_status;
  // The mutating calls' rules and audit log, shared with the web API. Null: the
  // service makes its own, without an audit log. Must outlive the service.
  JobActions* actions = nullptr;
};

// Thin gRPC adapter for JobService: parses, calls JobManager, converts the Status.
// WatchJob and WatchJobBatched stream committed events (server/service/watch_reactor.h)
// from the hub's watch cache or the store, so a slow watcher never stalls ingestion. A SubmitJob whose spec sets compile.preflight is validated, then handed
// to the PreflightGate; the gate's thread creates the job (or not) and finishes the
// call.
// Every method takes its request as raw bytes and parses it with ParseRequest, so a
// malformed request (invalid UTF-8 in a string field) is an INVALID_ARGUMENT naming the
// field rather than gRPC's empty UNIMPLEMENTED. The wire format is the typed one.
// ListArtifacts and PullArtifact read the ArtifactStore: NOT_FOUND for an unknown job or
// artifact; PullArtifact sends the ArtifactInfo first, then the bytes in messages of at
// most 256 KiB, one write in flight.
// Every call that changes something goes through JobActions (job_actions.h), which the
// web API shares: its role checks and its audit row. ListAudit reads that log (admin).
// Authorization: every method first authenticates the caller (UNAUTHENTICATED without
// a known bearer token), then applies its role (Authorizer::Can*): a viewer's
// SubmitJob, CancelJob or ResizeJob is PERMISSION_DENIED; a submitter's job gets the
// submitter as owner, and a job of another owner is, for a submitter, NOT_FOUND with
// the very message of a job that does not exist (so ids of others' jobs cannot be
// probed) in GetJob, CancelJob, ResizeJob, WatchJob(Batched), ListArtifacts and PullArtifact,
// and absent from ListJobs.
// Sharing the fleet (job_service_sharing.cc): CheckpointJob (a submitter: its own jobs)
// answers once the ranks' checkpoint is committed; CordonWorker and DrainWorker need the
// admin role. A submitter's SubmitJob of a non-preemptible job above priority 0 is
// PERMISSION_DENIED: opting out of preemption at a high priority would let one user
// hold the fleet.
using JobServiceBase = v1::JobService::WithRawCallbackMethod_SubmitJob<
    v1::JobService::WithRawCallbackMethod_GetJob<v1::JobService::WithRawCallbackMethod_ListJobs<
        v1::JobService::WithRawCallbackMethod_CancelJob<v1::JobService::WithRawCallbackMethod_ResizeJob<
            v1::JobService::WithRawCallbackMethod_WatchJob<v1::JobService::WithRawCallbackMethod_WatchJobBatched<
                v1::JobService::WithRawCallbackMethod_ListWorkers<v1::JobService::WithRawCallbackMethod_ListArtifacts<
                    v1::JobService::WithRawCallbackMethod_PullArtifact<
                        v1::JobService::WithRawCallbackMethod_CheckpointJob<
                            v1::JobService::WithRawCallbackMethod_CordonWorker<
                                v1::JobService::WithRawCallbackMethod_DrainWorker<
                                    v1::JobService::WithRawCallbackMethod_GetWebhookStatus<
                                    v1::JobService::WithRawCallbackMethod_ListAudit<
                                    v1::JobService::WithRawCallbackMethod_SubmitSweep<
                                    v1::JobService::WithRawCallbackMethod_GetSweep<
                                    v1::JobService::WithRawCallbackMethod_ListSweeps<
                                    v1::JobService::WithRawCallbackMethod_CancelSweep<
                                        v1::JobService::Service>>>>>>>>>>>>>>>>>>>;

class JobServiceImpl final : public JobServiceBase {
 public:
  JobServiceImpl(JobManager* manager, JobStore* store, EventHub* hub, PreflightGate* preflight,
                 ArtifactStore* artifacts, JobServiceOptions options = {});
  // Detaches the hub's watch cache of `store` (EventHub::DetachStore).
  ~JobServiceImpl() override;

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
  grpc::ServerWriteReactor<grpc::ByteBuffer>* WatchJobBatched(grpc::CallbackServerContext* ctx,
                                                              const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* ListArtifacts(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* PullArtifact(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* CheckpointJob(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                          grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CordonWorker(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DrainWorker(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  // Admin only (it names endpoints and their errors).
  grpc::ServerUnaryReactor* GetWebhookStatus(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListAudit(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response) override;
  // Sweeps (job_service_sweeps.cc): the rules of JobActions' sweep calls.
  grpc::ServerUnaryReactor* SubmitSweep(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetSweep(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListSweeps(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* CancelSweep(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;

 private:
  // The job `id` if `caller` may see it; NOT_FOUND as for a missing job otherwise.
  absl::StatusOr<v1::Job> VisibleJob(const Caller& caller, const std::string& id);
  // WatchJob and WatchJobBatched: the same checks, then a stream of that framing.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                                    WatchFraming framing);

  JobManager* const manager_;
  JobStore* const store_;
  EventHub* const hub_;
  PreflightGate* const preflight_;
  ArtifactStore* const artifacts_;
  std::unique_ptr<Authorizer> disabled_;  // set when options.authorizer is null
  const Authorizer* const authorizer_;
  std::unique_ptr<JobActions> own_actions_;  // set when options.actions is null
  JobActions* const actions_;
  WatcherCap watchers_;
  std::function<absl::StatusOr<v1::GetWebhookStatusResponse>()> webhook_status_;
};

}  // namespace trainyard
