// Field checks for JobService requests, run before a handler touches the manager or the
// store: every string has a length cap and every number a range, and an error names the
// field and quotes at most ~100 characters of what was sent (spec::Quote), so a hostile
// or careless client cannot store megabytes (a 5 MiB cancel reason once broke GetJob,
// ListJobs and WatchJob for every default client) or get its input echoed back in a
// status message larger than a client's metadata limit.
//
// Invalid UTF-8 in a proto3 string field never reaches these checks: protobuf refuses to
// parse such a message. The JobSpec itself is checked by the spec core (admission).
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/status.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard::request_checks {

inline constexpr std::size_t kMaxJobIdBytes = 64;      // ids are "job-<n>"
inline constexpr std::size_t kMaxCancelReasonBytes = 1024;
inline constexpr int kMaxListLimit = 1000;

// A job id: 1..kMaxJobIdBytes printable ASCII bytes. `field` names it in the error.
absl::Status CheckJobId(std::string_view field, std::string_view id);

absl::Status Check(const v1::GetJobRequest& request);
absl::Status Check(const v1::CancelJobRequest& request);  // reason: ≤ 1 KiB, no control characters but \t and \n
absl::Status Check(const v1::WatchJobRequest& request);   // from_seq ≥ 0
absl::Status Check(const v1::ListJobsRequest& request);   // known states, each once; limit in [0, 1000]

}  // namespace trainyard::request_checks
