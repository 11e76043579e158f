// A Trainer in a world of one for the in-process engine tests: no rendezvous store, no
// peers, one thread, its event lines written to memory. The tests that need a gang
// spawn real ranks instead (rank_harness.h).
#pragma once

#include <memory>
#include <sstream>

#include "worker/engine/config/engine_config.h"
#include "worker/engine/parallel/mesh/process_mesh.h"
#include "worker/engine/train/event_writer.h"
#include "worker/engine/train/trainer.h"

namespace trainyard::engine::testing {

// Owns the mesh and event sink the Trainer refers to, so they outlive it. Not
// thread-safe; owned by one test.
class OneRankTrainer {
 public:
  explicit OneRankTrainer(const EngineConfig& config);
  OneRankTrainer(const OneRankTrainer&) = delete;
  OneRankTrainer& operator=(const OneRankTrainer&) = delete;

  // One training step (Trainer::Step).
  v1::StepMetrics Step(int step) { return trainer_.Step(step); }
  Trainer& trainer() { return trainer_; }

 private:
  std::unique_ptr<ProcessMesh> mesh_;
  std::ostringstream out_;
  EventWriter events_;
  Trainer trainer_;
};

}  // namespace trainyard::engine::testing
