// Held-out evaluation ([validation]): every validation.freq steps (and before step 1
// and after the last) each rank runs validation.steps batches of its DP rank's share
// of the validation dataset forward, without gradients, and the loss is reduced over
// the world; rank 0 reports a Validation event (step, loss, tokens, ms).
//
// The batches are read in file order, never shuffled (data/dataset.h, LoadEvalBatch),
// so every evaluation sees the same samples and the curve compares like with like. It
// consumes no random numbers and changes no parameter, buffer or optimizer state:
// training losses are bit-identical with and without it. The forward is the training
// forward, grad mode on and no backward (its graph is dropped batch by batch): under
// NoGradGuard every compiled region would compile a second, no-grad variant (grad mode
// is in their guards), spending recompile_limit and reporting RECOMPILEs that are not
// the user's. Each batch marks progress in the flight ring, so a long evaluation is
// not a step timeout. Every rank must call Run at the same steps (it runs one
// collective). Not thread-safe; owned by the Trainer.
#pragma once

#include <cstdint>
#include <memory>

#include <torch/torch.h>

#include "common/flight/flight_ring.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/data/dataset.h"
#include "worker/engine/model/transformer_model.h"
#include "worker/engine/parallel/mesh/process_mesh.h"
#include "worker/engine/train/event_writer.h"
#include "trainyard/v1/event.pb.h"

namespace trainyard::engine {

class Evaluator {
 public:
  // Opens and validates the validation dataset (throws InputError naming it).
  // `flight`: this rank's ring (null: none).
  Evaluator(const EngineConfig& config, ProcessMesh& mesh, TransformerModel& model, EventWriter& events,
            c10::Device device, flight::FlightRing* flight);

  // Whether an evaluation is due after `step` optimizer steps (0: before the first).
  bool DueAfter(int64_t step) const;
  // Evaluates (collective) and, on rank 0, emits the event; returns it on every rank.
  v1::Validation Run(int64_t step);

  const Dataset& dataset() const { return *dataset_; }

 private:
  const EngineConfig& config_;
  ProcessMesh& mesh_;
  TransformerModel& model_;
  EventWriter& events_;
  c10::Device device_;
  flight::FlightRing* flight_;
  std::unique_ptr<Dataset> dataset_;
};

}  // namespace trainyard::engine
