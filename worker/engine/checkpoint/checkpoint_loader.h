// Loads a checkpoint written under any (dp, tp, ep) layout into this rank's shards
// (docs/checkpoints.md): verifies the manifest and every file it names (sizes, step,
// attempt, rank, layout, slice metadata), then assembles each local tensor from the
// slices that overlap it (hyper-rectangle intersection; only overlapping slices are
// read) and checks that they cover it completely. Restores this process's RNG states
// from the file of the same rank (rank 0's when the checkpoint had fewer ranks).
// No collectives. A free function; not thread-safe with respect to `state`'s tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/checkpoint/train_state.h"

namespace trainyard::engine {

// What this run needs from the data position: the same samples per step, dataset and
// seed, so that step s + 1 reads exactly the samples it would have without the stop.
struct CheckpointExpectations {
  int64_t global_batch = 0;
  std::string dataset;
  uint64_t seed = 0;
};

// Copies into every tensor of `state` (all of them, owned or not). Returns the verified
// manifest (step, optimizer_step, layout). Throws std::runtime_error naming the path,
// the tensor and the problem (incomplete or truncated checkpoint, malformed manifest or
// metadata, a tensor missing, unknown, of another shape or dtype, or not fully
// covered by slices, a data position this run would not continue).
CheckpointManifest LoadCheckpoint(const std::string& dir, const std::vector<StateTensor>& state, int rank,
                                  const CheckpointExpectations& expect);

}  // namespace trainyard::engine
