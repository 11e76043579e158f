// The training run's checkpoint writer (checkpoint_writer.h), configured from the job's
// checkpoint keys and the trainer's options, with rank 0's saves and removals reported
// as CheckpointSaved and CheckpointsPruned events and its log lines as Log events.
#pragma once

#include <memory>

#include "worker/engine/checkpoint/checkpoint_writer.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/parallel/mesh/parallel_context.h"
#include "worker/engine/train/event_writer.h"

namespace trainyard::engine {

struct TrainerOptions;

// Null when options.checkpoint_dir is empty (this rank writes no checkpoints). A writer
// exists whenever there is a root, also with checkpoint.interval 0: a requested
// checkpoint ("checkpoint now") needs one. `events` must outlive the writer.
std::unique_ptr<CheckpointWriter> MakeCheckpointWriter(const EngineConfig& config, const ParallelContext& ctx,
                                                       const TrainerOptions& options, EventWriter& events);

}  // namespace trainyard::engine
