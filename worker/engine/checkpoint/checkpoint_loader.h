// Loads a checkpoint written under any (dp, tp, ep) layout into this rank's shards
// (docs/checkpoints.md): verifies the manifest and every file it names (sizes, step,
// attempt, rank, layout, slice metadata: checkpoint_index.h), then assembles each local
// tensor from the slices that overlap it (hyper-rectangle intersection; only
// overlapping slices are read) and checks that they cover it completely. A resume also
// restores this process's RNG states from the file of the same rank (rank 0's when the
// checkpoint had fewer ranks); a weights-only load (LoadInitialWeights: a job that
// starts from where another ended) takes the model's parameters and buffers alone.
// No collectives. Free functions; not thread-safe with respect to `state`'s tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/checkpoint/train_state.h"
#include "worker/engine/model/transformer_model.h"

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

// Weights only: copies the checkpoint's model tensors into `state` (CollectModelState:
// parameters and buffers), ignoring its optim.* moments, RNG states and data position,
// so the optimizer starts fresh at step 0. Throws std::runtime_error as LoadCheckpoint.
CheckpointManifest LoadCheckpointWeights(const std::string& dir, const std::vector<StateTensor>& state);

// checkpoint.initial_load_path / trainyard-rank --load: the starting weights from
//   - a safetensors file of full tensors under torchtitan names (--save-init,
//     --save-final, `trainyard export`): ReadSafetensors + LoadFullState;
//   - a checkpoint directory (holding manifest.json), written under any layout;
//   - a folder of checkpoints (a job's checkpoint root): its newest complete one
//     (export's SelectCheckpoint: a damaged newest one is an error, not skipped);
// resharded into this rank's shards. Only parameters and buffers are set. Returns what
// it loaded from, for a log line ("checkpoint /ck/job-3/step-00000020-attempt-1 (step
// 20, written under dp=2 tp=1 ep=2)"). Throws std::invalid_argument("initial weights
// PATH: PROBLEM") for a missing, unreachable or invalid path or one that does not fit
// the model (a permanent failure: retrying cannot help); std::runtime_error when the
// filesystem fails to stat it (EIO, ESTALE), and rethrows std::bad_alloc and
// c10::Error (memory), which a retry may pass. Each rank picks a folder's newest
// checkpoint on its own: the caller makes the ranks agree (trainyard-rank does).
std::string LoadInitialWeights(const std::string& path, TransformerModelImpl& model);

}  // namespace trainyard::engine
