#include "worker/engine/train/checkpoint_events.h"

#include <csignal>
#include <string>
#include <utility>

#include "worker/engine/train/trainer.h"

namespace trainyard::engine {
namespace {

v1::CheckpointSaved SavedEvent(const CheckpointSavedInfo& s) {
  v1::CheckpointSaved saved;
  saved.set_step(s.step);
  saved.set_path(s.path);
  saved.set_bytes(s.bytes);
  saved.set_blocked_ms(s.blocked_ms);
  saved.set_write_ms(s.write_ms);
  saved.set_dp(s.dp);
  saved.set_tp(s.tp);
  saved.set_ep(s.ep);
  saved.set_requested(s.requested);
  if (s.metric) {
    saved.set_metric_name(s.metric->name);
    saved.set_metric(s.metric->value);
  }
  return saved;
}

v1::CheckpointsPruned PrunedEvent(int64_t step, const PruneResult& p) {
  v1::CheckpointsPruned pruned;
  for (const RemovedCheckpoint& r : p.removed) {
    v1::CheckpointRef* ref = pruned.add_removed();
    ref->set_step(r.step);
    ref->set_path(r.path);
    ref->set_attempt(r.attempt);
    ref->set_bytes(r.bytes);
  }
  pruned.set_step(step);
  pruned.set_bytes_freed(p.bytes_freed);
  pruned.set_bytes_kept(p.bytes_kept);
  pruned.set_kept(p.kept);
  return pruned;
}

}  // namespace

std::unique_ptr<CheckpointWriter> MakeCheckpointWriter(const EngineConfig& config, const ParallelContext& ctx,
                                                       const TrainerOptions& options, EventWriter& events) {
  if (options.checkpoint_dir.empty()) return nullptr;
  CheckpointWriterOptions o;
  o.root = options.checkpoint_dir;
  o.attempt = options.attempt;
  o.rank = ctx.rank;
  o.dp = ctx.dp;
  o.tp = ctx.tp;
  o.ep = ctx.ep;
  o.keep = config.checkpoint.keep;
  o.keep_best = config.checkpoint.keep_best;
  o.best_metric = config.checkpoint.best_metric;
  if (options.kill_in_prune && ctx.rank == 0) {
    o.prune_hook = [&events](const std::string& deleting) {
      events.Log("info", "test hook: killed while removing " + deleting);
      ::raise(SIGKILL);
    };
  }
  o.wait_for_ranks_s = config.parallelism.collective_timeout_s;
  o.pause_at_step = options.pause_checkpoint_at_step;
  o.hang_requested = options.hang_requested_checkpoint;
  o.on_log = [&events](const std::string& line) { events.Log("info", line); };
  if (ctx.rank == 0) {
    o.on_saved = [&events](const CheckpointSavedInfo& s) { events.Checkpoint(SavedEvent(s)); };
    o.on_pruned = [&events](int64_t step, const PruneResult& p) {
      if (p.removed.empty() && p.finished.empty()) return;
      events.CheckpointsPruned(PrunedEvent(step, p));
    };
  }
  return std::make_unique<CheckpointWriter>(std::move(o));
}

}  // namespace trainyard::engine
