// Writes asynchronous, layout-independent checkpoints (docs/checkpoints.md). Save()
// blocks the step only while this rank's owned shards (OwnsShard: each element once
// over the world) and its RNG states are copied into host memory (from a GPU into
// pinned buffers kept across saves, all copies in flight at once); a background thread
// then writes <root>/step-S-attempt-A/rank-R.safetensors (temporary file, fsync,
// rename). Rank 0's thread then waits for every rank's file to appear, writes
// manifest.json the same way (and fsyncs the directory), reports the save and prunes
// (checkpoint_retention.h). Rank 0 also finishes deletions a crash cut short when it
// is constructed. A new Save first waits for the previous write of this rank.
// A failed write surfaces as an exception naming the path from the next Save, Wait or
// ThrowIfFailed. Not thread-safe: one owner (the Trainer) calls it; the callbacks run
// on the background thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/checkpoint/checkpoint_retention.h"
#include "worker/engine/checkpoint/train_state.h"

namespace trainyard::engine {

struct CheckpointSavedInfo {
  int64_t step = 0;
  std::string path;   // the checkpoint directory
  int64_t bytes = 0;  // every rank's file together
  double blocked_ms = 0;
  double write_ms = 0;
  int dp = 1, tp = 1, ep = 1;
  bool requested = false;                  // saved on request ("checkpoint now"), not for the interval
  std::optional<CheckpointMetric> metric;  // recorded in its manifest
};

struct CheckpointWriterOptions {
  std::string root;  // checkpoint.dir (or trainyard-rank --checkpoint-dir)
  int attempt = 1;
  int rank = 0;
  int dp = 1, tp = 1, ep = 1;
  int keep = 3;
  int keep_best = 0;              // checkpoint.keep_best
  std::string best_metric;        // checkpoint.best_metric
  PruneHook prune_hook;           // test hook (checkpoint_retention.h)
  double wait_for_ranks_s = 300;  // rank 0: the longest wait for the other ranks' files
  int64_t pause_at_step = 0;      // test hook (TRAINYARD_TEST_PAUSE_CHECKPOINT_AT_STEP); 0: off
  // Test hook (TRAINYARD_TEST_HANG_REQUESTED_CHECKPOINT): the write of every requested
  // checkpoint stops mid-file, as pause_at_step does, and sleeps until killed.
  bool hang_requested = false;
  std::function<void(const CheckpointSavedInfo&)> on_saved;         // rank 0, after the manifest landed
  std::function<void(int64_t step, const PruneResult&)> on_pruned;  // rank 0, after each prune
  std::function<void(const std::string&)> on_log;                   // informational lines
};

// Facts of the step being saved (the manifest's fields beyond the tensors).
struct CheckpointStep {
  int64_t step = 0;
  int64_t optimizer_step = 0;
  int64_t global_batch = 0;  // samples per step
  std::string dataset;
  uint64_t seed = 0;
  bool requested = false;                  // asked for ("checkpoint now"); reported in CheckpointSavedInfo
  std::optional<CheckpointMetric> metric;  // into the manifest, for best-K retention
};

class CheckpointWriter {
 public:
  explicit CheckpointWriter(CheckpointWriterOptions options);
  // Waits for a write in flight (rank 0 stops waiting for other ranks' files at once),
  // swallowing its error: a rank that is already failing reports its own.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  void Save(const CheckpointStep& step, const std::vector<StateTensor>& state);
  void Wait();           // until the write in flight is done; rethrows its error
  void ThrowIfFailed();  // rethrows the error of a finished write, never blocks

 private:
  void Write(const CheckpointStep& step, std::vector<std::pair<std::string, torch::Tensor>> tensors,
             std::string metadata, double blocked_ms);

  CheckpointWriterOptions options_;
  // Pinned host copies of this rank's device tensors, by name, reused by every save:
  // page-locked allocations are slow, and a save only starts after the last write ended.
  std::map<std::string, torch::Tensor> staging_;
  std::future<void> pending_;
  std::atomic<bool> abandon_{false};
};

}  // namespace trainyard::engine
