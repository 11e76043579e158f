// What `trainyard get`, `explain` and `watch` know about a job beyond GetJob: its stored events
// (the WatchJobBatched replay up to Job.last_seq) folded into a history. The controller keeps
// every state change, rank state, step, validation, compile event, stall, checkpoint and artifact
// as an event, so the CLI derives state history, attempts, workers, last metrics and
// per-region compile statistics from them instead of asking for a new RPC.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard::cli {

absl::Time ToTime(const google::protobuf::Timestamp& t);
// "2026-12-01 10:02:03Z"; "-" for absl::InfinitePast().
std::string FormatUtc(absl::Time t);
// 42 s -> "42s", 185 s -> "3m05s", 7380 s -> "2h03m"; negative -> "0s".
std::string HumanDuration(absl::Duration d);

// Per compile region, over every rank and attempt (a region key names one shape of one
// layer kind; every layer with that key shares the cache).
struct RegionCompileStats {
  std::string region;
  int compiles = 0;    // COMPILE events (first entry of a cache)
  int recompiles = 0;  // RECOMPILE events (a guard failed: a new entry)
  int fallbacks = 0;   // FALLBACK events (the region runs eager from then on)
  int graph_breaks = 0;
  int unsafe_side_effects = 0;
  bool limit_hit = false;  // a RECOMPILE_LIMIT event
  // From the newest SUMMARY event of each rank, summed over ranks; -1 before any.
  int64_t hits = -1;
  int64_t misses = -1;
  std::string last_recompile_reason;  // of the newest RECOMPILE or RECOMPILE_LIMIT
  std::string last_fallback_reason;
};

struct StateChangeRecord {
  absl::Time time;
  v1::Job::State state = v1::Job::STATE_UNSPECIFIED;
  std::string reason;
  int attempt = 0;
};

struct AttemptRecord {
  int attempt = 0;
  absl::Time start = absl::InfinitePast();  // its first event
  absl::Time end = absl::InfinitePast();    // its last rank end, or the job's end
  std::map<int, std::string> rank_workers;  // rank -> worker, from RUNNING rank states
  int64_t last_step = 0;
  std::vector<std::string> rank_failures;  // "rank 1 on w1: FAILED exit_code=1: ..."
  std::string end_state;                   // the job state that ended it, if any
};

// The events of one job folded together; feed them in seq order.
class JobHistory {
 public:
  void Add(const v1::Event& event);

  const std::vector<StateChangeRecord>& states() const { return states_; }
  const std::map<int, AttemptRecord>& attempts() const { return attempts_; }
  // Regions in the order they first appeared.
  std::vector<RegionCompileStats> Regions() const;
  const std::optional<v1::Event>& last_step() const { return last_step_; }
  // The newest Validation (of the newest attempt, then the highest step), and how many
  // there were in all attempts.
  const std::optional<v1::Event>& last_validation() const { return last_validation_; }
  int64_t validation_count() const { return validation_count_; }
  // One loss per optimizer step (the first report of each step), oldest first, at most
  // kMaxLosses of the newest.
  const std::vector<double>& losses() const { return losses_; }
  // The step of each of losses(): training.log_freq apart, and back to an earlier step
  // after a restart, so their count is not the number of steps.
  const std::vector<int64_t>& loss_steps() const { return loss_steps_; }
  // The newest kMaxListed checkpoints and stalls, oldest first; *_count() says how many
  // there were in all. A job of a million steps may save thousands of checkpoints, and
  // `get` keeps no more than it prints. Checkpoints that a CheckpointsPruned event
  // reports removed leave the list: it holds the kept ones.
  const std::vector<v1::Event>& checkpoints() const { return checkpoints_; }
  // From the CheckpointsPruned events: checkpoints removed in all, and the newest
  // event's bytes kept on disk (-1 before any) and bytes freed summed.
  int64_t checkpoints_removed() const { return checkpoints_removed_; }
  int64_t checkpoint_bytes_kept() const { return checkpoint_bytes_kept_; }
  int64_t checkpoint_bytes_freed() const { return checkpoint_bytes_freed_; }
  const std::vector<v1::Event>& stalls() const { return stalls_; }
  int64_t checkpoint_count() const { return checkpoint_count_; }
  int64_t stall_count() const { return stall_count_; }
  int recompiles() const { return recompiles_; }
  int64_t last_seq() const { return last_seq_; }
  // RESTARTING state changes, less those of preemptions (IsPreemptionReason): a
  // preemption is no failure and uses no restart.
  int restarts() const;
  // The state change that stopped each preempted attempt: the first RESTARTING or PENDING
  // one of an attempt whose reason IsPreemptionReason (the controller repeats the reason,
  // with more after it, while the job waits), oldest first.
  std::vector<StateChangeRecord> preemptions() const;

  static constexpr size_t kMaxLosses = 256;
  static constexpr size_t kMaxListed = 20;

 private:
  std::vector<StateChangeRecord> states_;
  std::map<int, AttemptRecord> attempts_;
  std::vector<std::string> region_order_;
  std::map<std::string, RegionCompileStats> regions_;
  // (region, attempt, rank) -> newest SUMMARY's hits and misses.
  std::map<std::tuple<std::string, int, int>, std::pair<int64_t, int64_t>> summaries_;
  std::optional<v1::Event> last_step_;
  std::optional<v1::Event> last_validation_;
  int64_t validation_count_ = 0;
  int64_t last_loss_step_ = 0;
  int last_loss_attempt_ = 0;
  std::vector<double> losses_;
  std::vector<int64_t> loss_steps_;
  std::vector<v1::Event> checkpoints_;
  std::vector<v1::Event> stalls_;
  int64_t checkpoint_count_ = 0;
  int64_t checkpoints_removed_ = 0;
  int64_t checkpoint_bytes_kept_ = -1;
  int64_t checkpoint_bytes_freed_ = 0;
  int64_t stall_count_ = 0;
  int recompiles_ = 0;
  int64_t last_seq_ = 0;
};

// A state change's reason when the controller stopped the attempt for a higher-priority
// job ("preempted by job-N (priority P)") or a drain ("drained from W: REASON").
bool IsPreemptionReason(const std::string& reason);

// hits and misses out of a SUMMARY reason "hits=12 misses=1 eager_fallbacks=0 ...";
// false when either is missing.
bool ParseSummaryCounts(const std::string& reason, int64_t* hits, int64_t* misses);

// A hint for a recompile, fallback or limit reason the engine writes (see
// worker/engine/compile): which guard failed and what usually causes it. "" when the
// reason is not one it knows.
std::string CompileHint(const std::string& reason);

// At most `n` bytes of a reason, cut at a UTF-8 boundary, "…" appended when cut.
std::string ClipReason(const std::string& s, size_t n);

}  // namespace trainyard::cli
