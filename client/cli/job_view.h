// `trainyard get` and `explain`: a job (GetJob) and its history (job_history.h) as text.
#pragma once

#include <string>

#include "client/cli/job_history.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard::cli {

// `trainyard get`: the whole job, e.g.
//   job-3  moe-debug  SUCCEEDED  owner local  attempt 1
//   preempted  2 times, last ...  (only when Job.preemptions > 0)
//   spec        preset debug: dim 256, 4 layers (1 dense), 8 experts top-2 ...
//   state history ... attempts ... workers ... last metrics (and epoch) ... last
//   validation ... checkpoints ... artifacts
// `artifacts` may be empty; a non-empty `artifacts_error` says why they are unknown
// (the listing failed: the rest of the description still stands). Ends with a newline.
std::string FormatJobDescription(const v1::Job& job, const JobHistory& history,
                                 const std::vector<v1::ArtifactInfo>& artifacts,
                                 const std::string& artifacts_error = "");

// What `explain` adds after the scheduler part: the compile summary per region with a
// hint per known cause, the restarts with their causes, the preemptions (Job.preemptions,
// and each PENDING state change "preempted by ..." or "drained from ..." with its time),
// and the stalls. "" when the job has none of them. Ends with a newline otherwise.
std::string FormatExplainHistory(const v1::Job& job, const JobHistory& history);

}  // namespace trainyard::cli
