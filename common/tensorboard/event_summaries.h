// What TensorBoard shows of a job: the mapping from the controller's stored events
// (trainyard.v1.Event) to TensorBoard records, one run per job attempt. Pure; the tags
// and their steps are listed in docs/tracking.md:
//   train/loss, train/grad_norm, train/lr, train/tokens, train/epoch,
//   perf/tokens_per_s, perf/model_tflops, perf/mfu, perf/step_ms, perf/data_ms,
//   memory/peak_rss_mb, memory/peak_tensor_bytes,
//   experts/imbalance, experts/dropped_tokens,
//   experts/load/expertN                                (StepMetrics, at its step)
//   val/loss, val/tokens, val/ms                        (Validation, at its step)
//   compile/compiles, compile/recompiles, compile/graph_breaks (running counts),
//   compile/compile_ms                                  (CompileEvent, at the attempt's
//                                                        latest reported step)
//   faults/stalls (running count), faults/stall_waited_s (Stall, at its step)
//   checkpoint/bytes, checkpoint/blocked_ms, checkpoint/write_ms (CheckpointSaved),
//   checkpoint/metric (CheckpointSaved with a best_metric), checkpoint/bytes_freed,
//   checkpoint/bytes_kept, checkpoint/kept (CheckpointsPruned, at the save's step)
// and the job's resolved spec as text (tag `spec`, TensorBoard's text plugin).
// Values are written as they were stored, NaN and infinities included (simple_value is
// a float, so a double is rounded to the nearest float).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensorboard/event.pb.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard::tensorboard {

// The running values one attempt's mapping needs beyond the event at hand; saved with
// the writer's progress so a resumed writer continues the counts.
struct AttemptCounters {
  int64_t last_step = 0;  // the latest StepMetrics step of the attempt
  int64_t compiles = 0;
  int64_t recompiles = 0;
  int64_t graph_breaks = 0;
  int64_t stalls = 0;

  bool operator==(const AttemptCounters& o) const {
    return last_step == o.last_step && compiles == o.compiles && recompiles == o.recompiles &&
           graph_breaks == o.graph_breaks && stalls == o.stalls;
  }
};

// The records of `event` (none for kinds TensorBoard does not show: logs, rank and job
// states, artifacts), updating `counters`.
std::vector<Event> Summarize(const v1::Event& event, AttemptCounters* counters);

// The first record of every event file.
Event FileVersionEvent(double wall_time);
// The spec as the text plugin's record at step 0: its proto3 JSON, indented, in a
// ```json fence (the plugin renders Markdown). Always valid UTF-8: protobuf's JSON
// printer drops a string's invalid bytes, and anything else invalid becomes U+FFFD.
Event SpecTextEvent(const v1::JobSpec& spec, double wall_time);
// The text SpecTextEvent shows, without the fence.
std::string SpecText(const v1::JobSpec& spec);

// The tag of the resolved spec's text record.
inline constexpr char kSpecTag[] = "spec";

}  // namespace trainyard::tensorboard
