// Where a job's checkpoints live, as the engine writes them and the controller checks
// and resumes them: <checkpoint.dir>/<job id>/step-<8 digits>-attempt-<a>/. The one
// definition of that layout, shared by the rank's checkpoint writer
// (worker/engine/checkpoint) and the controller's event fencing and restarts. A job run
// by trainyard-train has no job id: its root is checkpoint.dir itself. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trainyard::spec {

// <checkpoint_dir>/<job_id> (trailing slashes of checkpoint_dir dropped); checkpoint_dir
// alone for an empty job id; "" for an empty checkpoint_dir (no checkpoints).
std::string JobCheckpointRoot(std::string_view checkpoint_dir, std::string_view job_id);

// "step-00000010-attempt-1": the directory of the checkpoint of `step` written by
// `attempt`.
std::string CheckpointDirName(int64_t step, int attempt);

// JobCheckpointRoot(checkpoint_dir, job_id) + "/" + CheckpointDirName(step, attempt).
std::string CheckpointPath(std::string_view checkpoint_dir, std::string_view job_id, int64_t step, int attempt);

// The step and attempt a CheckpointDirName names; false for any other name.
bool ParseCheckpointDirName(std::string_view name, int64_t* step, int* attempt);

}  // namespace trainyard::spec
