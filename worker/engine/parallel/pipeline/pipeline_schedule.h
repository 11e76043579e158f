// Pipeline-parallel schedules as plain tables (docs/parallelism.md, "Pipeline
// schedules"): for each pipeline rank, the ordered list of forwards and backwards it
// runs. A runtime executes a rank's list in order and blocks on the activation or
// gradient each action needs, so everything a schedule promises (one forward and one
// backward per stage and microbatch, on the right rank, no deadlock, its bubble) is
// checkable here without torch or a single rank.
//
// Placement: with v virtual stages per rank the model is cut into pp·v global stages,
// and global stage s lives on rank s % pp (rank r holds stages r, r+pp, r+2pp, ...), as
// in Megatron-LM and torchtitan's interleaved schedules.
//
// Dependencies: forward of microbatch i at stage s needs forward of i at s-1; backward
// of i at s needs forward of i at s and backward of i at s+1 (the last stage's backward
// needs only its own forward).
//
// Free functions on values; no shared state.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard::engine {

enum class PipeOp { kForward, kBackward };

struct PipeAction {
  PipeOp op = PipeOp::kForward;
  int microbatch = 0;
  int stage = 0;  // global (virtual) stage, 0..pp*v-1; runs on rank stage % pp

  // Spelled out: this library builds as C++17 (the project's default), torch parts as 20.
  friend bool operator==(const PipeAction& a, const PipeAction& b) {
    return a.op == b.op && a.microbatch == b.microbatch && a.stage == b.stage;
  }
};

// "backward of microbatch 2 at stage 1": how errors name an action.
std::string DescribeAction(const PipeAction& action);

struct PipelineSchedule {
  std::string kind;  // "1F1B", "Interleaved1F1B", or whatever built a hand-made table
  int pp = 1;
  int virtual_stages = 1;  // per rank
  int microbatches = 1;
  std::vector<std::vector<PipeAction>> ranks;  // ranks[r]: what rank r runs, in order

  int num_stages() const { return pp * virtual_stages; }
};

// PipeDream-flush 1F1B, one stage per rank: rank r runs min(pp-1-r, m) warm-up
// forwards, then alternates one forward and one backward, then drains the remaining
// backwards. Needs pp >= 1 and m >= 1; m < pp is allowed (the warm-up is capped at m).
absl::StatusOr<PipelineSchedule> Make1F1B(int pp, int microbatches);

// Megatron-LM's interleaved 1F1B with v >= 2 stages per rank. Microbatches go through
// a rank's chunks in groups of pp (forwards: chunk 0 for microbatches 0..pp-1, chunk 1
// for the same group, ..., then the next group; backwards the same with the chunks
// reversed); rank r runs min((pp-r-1)*2 + (v-1)*pp, m*v) warm-up forwards, then 1F1B,
// then the remaining backwards. Needs m % pp == 0, as Megatron does.
absl::StatusOr<PipelineSchedule> MakeInterleaved1F1B(int pp, int virtual_stages, int microbatches);

// OK when every (stage, microbatch) has exactly one forward and one backward, each in
// the list of rank stage % pp, and running the lists in order cannot deadlock. The
// error names the rank, the tick (index in its list), the action and what it waits for.
absl::Status ValidateSchedule(const PipelineSchedule& schedule);

struct TimedAction {
  PipeAction action;
  double start = 0;
  double end = 0;
};

struct PipelineTimeline {
  int pp = 1;
  int virtual_stages = 1;
  std::vector<std::vector<TimedAction>> ranks;  // in each rank's list order
  double makespan = 0;
  double idle = 0;             // summed over ranks, over [0, makespan]
  double bubble_fraction = 0;  // idle / (pp * makespan)
};

// Runs the schedule on an event-driven clock: each rank takes its list in order, and an
// action starts once its rank is free and its dependencies have ended. Communication is
// free. Costs are per action (one stage's forward or backward of one microbatch) and
// must be positive and finite. Fails as ValidateSchedule does on a bad table.
absl::StatusOr<PipelineTimeline> Simulate(const PipelineSchedule& schedule, double forward_cost = 1,
                                          double backward_cost = 2);

// One line per rank ("rank 0: F0 F1 .  B0 -- ..."), one cell per `tick` of time up to
// the makespan: an action's label in its first cell ("F3" with one stage per rank,
// "F3s2" naming the global stage otherwise), "-" in the cells it still occupies, "." in
// idle ones. Times are rounded to the nearest tick, so give costs that are multiples of
// it for an exact picture. Trailing spaces are trimmed.
std::string RenderTimeline(const PipelineTimeline& timeline, double tick = 1);

}  // namespace trainyard::engine
