#pragma once

#include <string>

#include "trainyard/v1/worker_service.pb.h"

namespace trainyard {

// The controller's outbound half of one worker's Connect stream. Implementations
// queue and never block, so callers may hold their own locks while sending.
class WorkerChannel {
 public:
  virtual ~WorkerChannel() = default;
  virtual void Send(v1::ControllerMessage message) = 0;
  // Ends the stream (for a worker declared lost or replaced by a newer connection).
  virtual void Close(const std::string& reason) = 0;
};

}  // namespace trainyard
