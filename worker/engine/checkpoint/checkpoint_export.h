// `trainyard export`'s engine, without torch: turns one sharded checkpoint (any dp, tp,
// ep) into ONE safetensors file of the model's full parameters and buffers (never
// optim.* or rng.*), under torchtitan or Hugging Face names (export_names.h), or into a
// Hugging Face model folder (config.json, sharded safetensors and their index). The
// output header is computed from the shards' slice metadata first; then each slice's
// bytes are copied to their strided place in the output with pread/pwrite through one
// bounded buffer (kExportBufferBytes), so memory stays bounded whatever the model's
// size. The file is written to a hidden temporary name in the output's folder,
// fsynced and renamed into place (common/base/file_io.h's RenameDurably): a failure at
// any point leaves no output and no temporary file. Free functions; thread-safe as long
// as two calls do not write the same output.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "worker/engine/checkpoint/checkpoint_index.h"
#include "worker/engine/checkpoint/export_names.h"

namespace trainyard::engine {

// The copy buffer: the most tensor data an export holds in memory at once.
inline constexpr std::size_t kExportBufferBytes = 4 << 20;

struct ExportOptions {
  // A checkpoint directory (holding manifest.json) or a folder of them (a job's
  // checkpoint root, step-*-attempt-*/ inside).
  std::string checkpoint;
  std::optional<int64_t> step;  // that step's checkpoint; else the newest complete one
  bool best = false;            // the best by its manifest metric (SelectBestCheckpoint); not with step
  // The .safetensors file to write, or with --names hf a folder (any other name): a
  // Hugging Face model folder of config.json, model-0000i-of-0000N.safetensors shards
  // and model.safetensors.index.json, which transformers' from_pretrained loads.
  std::string output;
  ExportNames names = ExportNames::kTorchtitan;
  bool force = false;  // replace an existing output (else refused)
  // Added to __metadata__ next to format=pt, trainyard.step, trainyard.source and
  // trainyard.names (the CLI adds trainyard.spec and trainyard.job_id).
  std::map<std::string, std::string> metadata;
  // A folder output's config.json text (spec::HuggingFaceConfigJson); required there.
  std::string hf_config_json;
  // A folder output's shard size: tensors are added to a shard while its data stays
  // within this (a bigger tensor has a shard of its own). HF's save_pretrained default.
  std::uint64_t max_shard_bytes = 5'000'000'000ull;
};

struct ExportResult {
  std::string checkpoint_dir;  // the checkpoint exported
  int64_t step = 0;
  int dp = 1, tp = 1, ep = 1;
  std::size_t tensors = 0;
  std::uint64_t bytes = 0;                 // of the output file
  std::optional<CheckpointMetric> metric;  // the checkpoint's, when its manifest has one
};

// The checkpoint directory `path` means: `path` itself when it holds manifest.json
// (then `step`, if given, must be its step), else under `path` the complete checkpoint
// of `step` (its newest attempt that verifies) or the newest complete one. NOT_FOUND
// when `path` is missing or holds no complete checkpoint (naming the incomplete
// directories it skipped) or none of `step` (listing the steps it has).
absl::StatusOr<std::string> SelectCheckpoint(const std::string& path, std::optional<int64_t> step);

// The best checkpoint under the folder `path` (a job's checkpoint root): of the
// complete ones whose manifest verifies and holds a finite metric, the lowest (of equal
// values the newest). NOT_FOUND when there is none (naming how many complete ones had
// no metric or a NaN one: checkpoint.keep_best was off, or no validation scored them);
// INVALID_ARGUMENT when `path` is itself one checkpoint directory.
absl::StatusOr<std::string> SelectBestCheckpoint(const std::string& path);

// Exports as above. The chosen directory is pinned (checkpoint_pin.h) while it is read,
// so the job that writes it does not prune it meanwhile; a folder that cannot be pinned
// (a read-only mount) is read unpinned. Errors: INVALID_ARGUMENT (an empty output, an output that is a
// directory, a tensor with no Hugging Face name), NOT_FOUND (no checkpoint as above, the
// output's folder missing), ALREADY_EXISTS (the output exists and not `force`),
// DATA_LOSS (a damaged checkpoint: a truncated or missing file, bad metadata, slices
// that overlap or leave a gap), INTERNAL (a write error). Each message names the file,
// and the tensor and offset where it applies.
absl::StatusOr<ExportResult> ExportCheckpoint(const ExportOptions& options);

}  // namespace trainyard::engine
