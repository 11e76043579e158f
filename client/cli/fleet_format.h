// What the CLI shows of sharing a fleet (issue 29): a requested checkpoint, cordoned and
// drained workers, a job's preemptions, and its owner's quota, usage and fair share
// (Job.share, filled by GetJob). Pure functions over the controller's messages; the
// callers make the text terminal-safe.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "trainyard/v1/job.pb.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard::cli {

// `trainyard checkpoint`: "job-3: checkpoint at step 120: /ckpt/job-3/step-120 (4096
// bytes)\n".
std::string FormatCheckpointDone(absl::string_view job_id, const v1::CheckpointRef& checkpoint);

// `workers cordon` / `uncordon`, from the worker the controller answered with:
//   "w1: cordoned (disk swap): takes no new ranks; what runs there keeps running\n"
//   "w1: uncordoned: takes new ranks again\n"
std::string FormatCordonResult(const v1::WorkerInfo& worker);
// `workers drain`: the cordon line, then each job it moves, one per line:
//   "w1: cordoned (disk swap); moving 2 jobs (each saves a checkpoint, stops and is
//    rescheduled elsewhere):\n  job-3\n  job-5\n"
// or "...; no job has a rank there\n".
std::string FormatDrainResult(const v1::DrainWorkerResponse& drained);
// The workers table's CORDONED cell: "yes (disk swap)", "yes", or "-".
std::string FormatCordoned(const v1::WorkerInfo& worker);

// `get`: "preempted  2 times, last 2026-12-01 10:02:03Z (not failures: no restart used)\n",
// "" when the job was never preempted.
std::string FormatPreemptedLine(const v1::Job& job);

// `explain`: the owner's quota and fair-share standing, 12-column labels like the rest
// of explain, e.g.
//   quota:      owner alice 6 of 8 slots, 2 GPUs (no limit)
//               group research 10 of 16 slots, 4 of 8 GPUs
//   usage:      12.50 slot-hours (decayed), weight 2, fair share 6.25 (usage / weight: ...)
// (no group line when the policy puts the owner in none). "" when the controller sent
// no share (an older controller). Ends with a newline otherwise.
std::string FormatShare(const v1::Job& job);

// "1st", "2nd", "3rd", "4th", "11th", "22nd".
std::string Ordinal(int n);

}  // namespace trainyard::cli
