#pragma once

#include <vector>

#include "absl/status/status.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard {

// What the controller link asks of the part of the worker that runs ranks.
// Implementations are thread-safe.
class JobRunner {
 public:
  virtual ~JobRunner() = default;

  // Starts the assigned ranks, or reports why not (also as FAILED rank events).
  virtual absl::Status Assign(const trainyard::v1::Assign &assign) = 0;
  // Kills the ranks of one attempt (attempt 0: every attempt); unknown jobs are
  // ignored.
  virtual void Cancel(const trainyard::v1::Cancel &cancel) = 0;
  // Asks the live ranks of one attempt here to save a checkpoint at their next step
  // ("checkpoint now", docs/checkpoints.md); an attempt with no live rank here is
  // ignored. Returns without waiting for the checkpoint.
  virtual void RequestCheckpoint(const trainyard::v1::CheckpointRequest &request) = 0;
  virtual int FreeSlots() const = 0;
  // Attempts with ranks still alive here, for Register after a reconnect.
  virtual std::vector<trainyard::v1::RunningAttempt> Running() const = 0;
};

}  // namespace trainyard
