#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

#include "server/state/artifact_store.h"
#include "server/state/job_manager.h"
#include "trainyard/v1/worker_service.grpc.pb.h"

namespace trainyard {

// Thin gRPC adapter for WorkerService.Connect: one bidi stream per worker. Reads go to
// JobManager; the manager writes back through a WorkerChannel that queues onto the
// stream. An event batch is acknowledged only after the manager committed it. The
// stream carries raw bytes, parsed by server/wire_codec, so a message with invalid
// UTF-8 ends it with INVALID_ARGUMENT naming the field (the wire format is the typed one).
//
// OpenArtifact and UploadArtifact are thin over ArtifactStore (raw bytes as well). The
// caller is taken to be header.worker, which must name a worker registered and connected
// now (else PERMISSION_DENIED). A chunk above 256 KiB is INVALID_ARGUMENT; the first
// chunk must carry the opened header, later ones may repeat it but not change it.
//
// With `require_worker_certificate` (the controller serves TLS) every call's worker is
// the one its client certificate names (server/peer_identity): a call without a worker
// certificate ends at once (UNAUTHENTICATED / PERMISSION_DENIED), and a Register.name or
// ArtifactHeader.worker other than the certificate's is PERMISSION_DENIED. Without it
// (plaintext on loopback, or --insecure) the messages' names are believed.
using WorkerServiceBase = v1::WorkerService::WithRawCallbackMethod_Connect<
    v1::WorkerService::WithRawCallbackMethod_OpenArtifact<
        v1::WorkerService::WithRawCallbackMethod_UploadArtifact<v1::WorkerService::Service>>>;

class WorkerServiceImpl final : public WorkerServiceBase {
 public:
  WorkerServiceImpl(JobManager* manager, ArtifactStore* artifacts,
                    bool require_worker_certificate = false)
      : manager_(manager),
        artifacts_(artifacts),
        require_worker_certificate_(require_worker_certificate) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Connect(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* OpenArtifact(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* UploadArtifact(grpc::CallbackServerContext* ctx,
                                                            grpc::ByteBuffer* response) override;

 private:
  // The caller's worker name from its certificate; "" when certificates are not required.
  absl::StatusOr<std::string> CallerName(const grpc::CallbackServerContext* ctx) const;

  JobManager* const manager_;
  ArtifactStore* const artifacts_;
  const bool require_worker_certificate_;
  std::atomic<int64_t> next_conn_{1};
};

}  // namespace trainyard
