// Which checkpoints a job keeps, and their safe removal (docs/checkpoints.md,
// "Retention"). Rank 0 prunes its root after each manifest lands:
//   - the newest `keep` complete checkpoints stay (the newest of all always: a resume,
//     a restart or a preemption continues from it);
//   - with keep_best = K, the K complete checkpoints whose manifest metric (of
//     best_metric) is lowest stay too; a checkpoint without that metric, or with a NaN
//     or infinite one, is never among them;
//   - a pinned one stays (checkpoint_pin.h: an export or a job loading it);
//   - an incomplete directory newer than the newest complete one stays (it is being
//     written); older incomplete ones go.
// Only directories of attempts <= the pruner's are considered (a later attempt's
// supersede it). Removal renames a directory to .deleting-<name> in the same root
// (fsynced), then deletes it, so a crash never leaves a half-deleted directory under a
// checkpoint's name: every lister ignores .deleting-*, and the next prune (and every
// writer's start) finishes them. Free functions; one pruner per root at a time (one
// job's rank 0).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace trainyard::engine {

inline constexpr const char* kDeletingPrefix = ".deleting-";

struct RetentionPolicy {
  int keep = 1;              // newest complete checkpoints kept (a value < 1 counts as 1)
  int keep_best = 0;         // best checkpoints kept beside them (0: off)
  std::string best_metric;   // the manifest metric they are ranked by, lower is better
};

// One checkpoint directory as the policy sees it.
struct RetentionCandidate {
  std::string path;
  int64_t step = 0;
  int attempt = 0;
  bool complete = false;          // holds manifest.json
  bool pinned = false;            // holds a live pin
  std::optional<double> metric;   // the best_metric value of its manifest, if any
};

enum class RetentionVerdict {
  kRemove,
  kNewest,      // among the newest `keep` complete ones (or the one just written)
  kBest,        // among the keep_best best
  kPinned,
  kBeingWritten,  // incomplete, newer than the newest complete one
};
const char* RetentionVerdictName(RetentionVerdict v);

// The pure decision: one verdict per candidate, in the candidates' order. `dirs` are
// one root's directories of the pruning attempt or earlier; `just_written` (a path
// among them, or "") is kept whatever the policy says.
std::vector<RetentionVerdict> PlanRetention(const std::vector<RetentionCandidate>& dirs, const RetentionPolicy& policy,
                                            const std::string& just_written);

struct RemovedCheckpoint {
  std::string path;  // its name before the removal
  int64_t step = 0;
  int attempt = 0;
  int64_t bytes = 0;
};

struct PruneResult {
  std::vector<RemovedCheckpoint> removed;  // this prune's, oldest first
  int64_t bytes_freed = 0;     // by those and by finished .deleting-* leftovers
  int64_t bytes_kept = 0;      // every checkpoint directory left under the root
  int kept = 0;                // how many
  std::vector<std::string> failures;  // "PATH: why" for what could not be removed
  std::vector<std::string> finished;  // .deleting-* leftovers of an earlier crash removed
};

// Test hook: called with the .deleting-* path after the rename and after the first of
// its files was removed (a crash there is the case the rename exists for).
using PruneHook = std::function<void(const std::string& deleting_path)>;

// Applies PlanRetention to `root` after `just_written` (attempt `attempt`) landed. Best
// effort: what cannot be removed is reported in failures (it costs disk, not the run).
PruneResult PruneCheckpoints(const std::string& root, const RetentionPolicy& policy, int attempt,
                             const std::string& just_written, const PruneHook& hook = nullptr);

// Removes every .deleting-* directory under `root` (a prune cut short); returns their
// paths and adds their bytes to *bytes_freed (when not null). Missing root: nothing.
std::vector<std::string> FinishInterruptedDeletions(const std::string& root, int64_t* bytes_freed);

// Bytes of the regular files under `dir`, recursively (0 when it is missing).
int64_t DirectoryBytes(const std::string& dir);

}  // namespace trainyard::engine
