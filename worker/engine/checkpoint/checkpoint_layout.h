// The on-disk layout of checkpoints, without torch (trainyard-train uses it too):
//   <root>/step-<8 digits>-attempt-<a>/rank-<5 digits>.safetensors   one per rank
//   <root>/step-<8 digits>-attempt-<a>/manifest.json                  written last
// A directory is complete exactly when its manifest.json exists (rank 0 renames it into
// place only after every rank's file is complete), and valid when the manifest parses
// and names every rank's file with its exact size. Free functions; thread-safe as long
// as two callers do not write or prune the same root (one job's rank 0 does).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/spec/checkpoint_path.h"

namespace trainyard::engine {

inline constexpr const char* kCheckpointFormat = "trainyard-checkpoint-v1";
inline constexpr const char* kManifestName = "manifest.json";

// fsync of a directory (its entries are then durable); throws naming `where`.
void FsyncDirectory(const std::string& dir, const std::string& where);

// Throws std::runtime_error("checkpoint WHERE: PROBLEM"): every checkpoint error.
[[noreturn]] void FailCheckpoint(const std::string& where, const std::string& problem);
// A manifest is a few hundred bytes per rank; a file past this is not one of ours.
inline constexpr std::size_t kMaxManifestBytes = 64 << 20;

using spec::CheckpointDirName;  // "step-00000010-attempt-1" (common/spec/checkpoint_path.h)
std::string RankFileName(int rank);                         // "rank-00003.safetensors"

struct ManifestFile {
  std::string name;  // relative to the checkpoint directory
  int rank = 0;
  int64_t bytes = 0;
};

// The score best-K retention ranks a checkpoint by (checkpoint.best_metric; lower is
// better), taken at the checkpoint's own step. A value that was not finite is stored as
// JSON null and read back as NaN: such a checkpoint is never one of the best.
struct CheckpointMetric {
  std::string name;  // "val_loss" | "train_loss"
  double value = 0;
};
inline constexpr std::size_t kMaxMetricNameBytes = 64;

// What a checkpoint holds beyond its tensors, as manifest.json spells it.
struct CheckpointManifest {
  int64_t step = 0;            // optimizer steps done; a resume continues at step + 1
  int attempt = 0;
  int dp = 1, tp = 1, ep = 1;  // the layout it was written under
  int64_t optimizer_step = 0;  // AdamW's step count (bias correction)
  int64_t global_batch = 0;    // samples per step (batch_size · dp · grad_accum_steps)
  int64_t samples_consumed = 0;
  std::string dataset;
  uint64_t seed = 0;
  std::vector<ManifestFile> files;  // one per rank, rank order
  int64_t total_bytes = 0;
  std::optional<CheckpointMetric> metric;  // absent when the job ranks none (keep_best = 0)
  int world() const { return dp * tp; }
};

std::string ManifestToJson(const CheckpointManifest& m);

// Parses and checks a manifest's text: JSON syntax, the format tag, every field present
// with its type (integers must be integers: "NaN", 1.5 or -1 are refused), the layout,
// one file per rank with a plain file name, samples_consumed = step · global_batch, and
// an optional "metric": {"name": string, "value": number or null}.
// Throws std::runtime_error naming `where` and the field.
CheckpointManifest ParseManifest(const std::string& text, const std::string& where);

// Reads <dir>/manifest.json, checks it (ParseManifest), that the directory's name
// agrees with its step and attempt, and that every file it names exists with exactly
// the bytes it lists. Throws std::runtime_error naming the path on any problem (a
// directory without a manifest is "incomplete").
CheckpointManifest ReadVerifiedManifest(const std::string& dir);

// Writes <dir>/manifest.json atomically: a temporary file, fsync, rename, fsync of the
// directory. Throws std::runtime_error naming the path.
void WriteManifestAtomically(const std::string& dir, const CheckpointManifest& m);

struct CheckpointDirEntry {
  std::string path;
  int64_t step = 0;
  int attempt = 0;
  bool complete = false;  // holds a manifest.json (not yet verified)
};

// Every step-*-attempt-* directory under `root`, oldest (step, attempt) first; empty
// when `root` does not exist.
std::vector<CheckpointDirEntry> ListCheckpointDirs(const std::string& root);

// The newest directory under `root` whose manifest verifies (ReadVerifiedManifest), or
// "" when there is none; incomplete and invalid ones are skipped.
std::string FindLatestCheckpoint(const std::string& root);

// 1 + the highest attempt of any checkpoint directory under `root` (1 when none): a
// run that resumes into the same root never writes into a directory of an earlier run.
int NextCheckpointAttempt(const std::string& root);

}  // namespace trainyard::engine
