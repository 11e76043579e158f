// The files a job's ranks will open, checked on the worker before any rank starts: a
// missing dataset file is then one message at assign time, not a rank that loads
// LibTorch, builds the model and fails seconds later (printed by its stderr, its error
// log and the FAILED state alike). The controller checks only the paths' form; whether
// a file exists is a fact of the machine that reads it.
#pragma once

#include "absl/status/status.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

// For training.dataset and validation.dataset "text" or "tokens": the dataset_path is
// expanded as the engine's reader expands it (data::ResolveDatasetPath: comma lists,
// globs, .idx beside .bin) and every file must be readable by this process; without
// `resuming`, a checkpoint.initial_load_path must exist. OK for synthetic data and no
// initial weights. Otherwise NOT_FOUND, INVALID_ARGUMENT or PERMISSION_DENIED whose
// message names the key, the entry and the file, e.g.
//   training.dataset_path: entry "/data/c.txt": file /data/c.txt does not exist
// These are the job's inputs, the same on every attempt: a rank failed for them exits
// kRankExitInputError (common/events/rank_exit.h).
//
// Reads the file system; thread-safe.
absl::Status CheckJobInputs(const v1::JobSpec& spec, bool resuming);

}  // namespace trainyard
