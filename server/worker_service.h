#pragma once

#include <atomic>
#include <cstdint>

#include "server/job_manager.h"
#include "trainyard/v1/worker_service.grpc.pb.h"

namespace trainyard {

// Thin gRPC adapter for WorkerService.Connect: one bidi stream per worker. Reads go to
// JobManager; the manager writes back through a WorkerChannel that queues onto the
// stream. An event batch is acknowledged only after the manager committed it.
class WorkerServiceImpl final : public v1::WorkerService::CallbackService {
 public:
  explicit WorkerServiceImpl(JobManager* manager) : manager_(manager) {}

  grpc::ServerBidiReactor<v1::WorkerMessage, v1::ControllerMessage>* Connect(
      grpc::CallbackServerContext* ctx) override;

 private:
  JobManager* const manager_;
  std::atomic<int64_t> next_conn_{1};
};

}  // namespace trainyard
