#pragma once

#include <atomic>
#include <cstdint>

#include "server/job_manager.h"
#include "trainyard/v1/worker_service.grpc.pb.h"

namespace trainyard {

// Thin gRPC adapter for WorkerService.Connect: one bidi stream per worker. Reads go to
// JobManager; the manager writes back through a WorkerChannel that queues onto the
// stream. An event batch is acknowledged only after the manager committed it. The
// stream carries raw bytes, parsed by server/request_parse, so a message with invalid
// UTF-8 ends it with INVALID_ARGUMENT naming the field (the wire format is the typed one).
class WorkerServiceImpl final
    : public v1::WorkerService::WithRawCallbackMethod_Connect<v1::WorkerService::Service> {
 public:
  explicit WorkerServiceImpl(JobManager* manager) : manager_(manager) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Connect(
      grpc::CallbackServerContext* ctx) override;

 private:
  JobManager* const manager_;
  std::atomic<int64_t> next_conn_{1};
};

}  // namespace trainyard
