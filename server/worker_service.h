#pragma once

#include <atomic>
#include <cstdint>

#include "server/artifact_store.h"
#include "server/job_manager.h"
#include "trainyard/v1/worker_service.grpc.pb.h"

namespace trainyard {

// Thin gRPC adapter for WorkerService.Connect: one bidi stream per worker. Reads go to
// JobManager; the manager writes back through a WorkerChannel that queues onto the
// stream. An event batch is acknowledged only after the manager committed it. The
// stream carries raw bytes, parsed by server/request_parse, so a message with invalid
// UTF-8 ends it with INVALID_ARGUMENT naming the field (the wire format is the typed one).
//
// OpenArtifact and UploadArtifact are thin over ArtifactStore (raw bytes as well). The
// calls carry no connection identity (there are no per-worker credentials yet), so the
// caller is taken to be header.worker, which must name a worker registered and connected
// now (else PERMISSION_DENIED). A chunk above 256 KiB is INVALID_ARGUMENT; the first
// chunk must carry the opened header, later ones may repeat it but not change it.
using WorkerServiceBase = v1::WorkerService::WithRawCallbackMethod_Connect<
    v1::WorkerService::WithRawCallbackMethod_OpenArtifact<
        v1::WorkerService::WithRawCallbackMethod_UploadArtifact<v1::WorkerService::Service>>>;

class WorkerServiceImpl final : public WorkerServiceBase {
 public:
  WorkerServiceImpl(JobManager* manager, ArtifactStore* artifacts)
      : manager_(manager), artifacts_(artifacts) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Connect(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* OpenArtifact(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* UploadArtifact(grpc::CallbackServerContext* ctx,
                                                            grpc::ByteBuffer* response) override;

 private:
  JobManager* const manager_;
  ArtifactStore* const artifacts_;
  std::atomic<int64_t> next_conn_{1};
};

}  // namespace trainyard
