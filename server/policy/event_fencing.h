// Checks of a worker's event against the job it names, run under the manager's state
// lock before the event is committed: an event of another attempt than the job's
// current one (older: a rank of an ended attempt; newer: forged), of a rank the
// current attempt did not place on the sending worker, a CheckpointSaved that
// cannot be this job's newest checkpoint, or an ArtifactRef (only the controller
// writes those, after an upload) is refused, not appended. Stall, StepMetrics and
// Validation events from the job's placed ranks of its current attempt pass. Field
// ranges that need no job (a negative byte count, NaN) are
// request_validation::InvalidEvent's.
//
// Pure: no I/O, no locks, no clock. Thread-safe (stateless).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {

// What a refused event is counted as (trainyard_events_dropped_total{reason=...}).
inline constexpr char kDropStaleAttempt[] = "stale_attempt";
inline constexpr char kDropForged[] = "forged";
inline constexpr char kDropBadCheckpoint[] = "bad_checkpoint";

struct EventRefusal {
  std::string label;  // one of the kDrop* values; empty: the event may be stored
  std::string why;    // a sentence for the log
};

// Where the attempts of `job_id` write checkpoints: checkpoint.dir/<job id> ("" when
// spec.checkpoint.dir is empty).
std::string CheckpointDirOf(const v1::JobSpec& spec, std::string_view job_id);

// Why `event`, sent by worker `worker`, cannot be stored for `job` (its current
// attempt, placement, spec and last_checkpoint), or an empty label. `checkpoint_floor`:
// the newest checkpoint step already accepted (the job's, or one earlier in the same
// batch), so a batch with steps 5 then 3 keeps only 5.
EventRefusal ScreenEvent(const v1::Job& job, const std::string& worker, const v1::Event& event,
                         int64_t checkpoint_floor);

// ScreenEvent over one job's events from `worker`, in order: removes the refused ones
// from `events` and returns why each was refused.
std::vector<EventRefusal> ScreenEvents(const v1::Job& job, const std::string& worker,
                                       std::vector<v1::Event>* events);

// Why `ck` cannot be checkpoint `job`'s newest, or "": step in [1, training.steps] and
// past `floor`; path under CheckpointDirOf(job)/ without "." or ".." components.
std::string CheckpointJobProblem(const v1::Job& job, const v1::CheckpointSaved& ck, int64_t floor);

}  // namespace trainyard
