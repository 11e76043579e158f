// Field checks for JobService requests, run before a handler touches the manager or the
// store: every string has a length cap and every number a range, and an error names the
// field and quotes at most ~100 characters of what was sent (spec::Quote), so a hostile
// or careless client cannot store megabytes (a 5 MiB cancel reason once broke GetJob,
// ListJobs and WatchJob for every default client) or get its input echoed back in a
// status message larger than a client's metadata limit.
//
// Invalid UTF-8 in a proto3 string field never reaches these checks: protobuf refuses to
// parse such a message, and server/wire_codec names the field in INVALID_ARGUMENT.
// The JobSpec itself is checked by the spec core (admission).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "trainyard/v1/job_service.pb.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard::request_validation {

inline constexpr std::size_t kMaxJobIdBytes = 64;      // ids are "job-<n>"
inline constexpr std::size_t kMaxCancelReasonBytes = 1024;
inline constexpr int kMaxListLimit = 1000;
inline constexpr int kMaxRunningAttempts = 4096;
inline constexpr int kMaxBatchEvents = 10000;               // workers send 64
inline constexpr std::size_t kMaxEventBytes = 1 << 20;      // one serialized Event

// A job id: 1..kMaxJobIdBytes printable ASCII bytes. `field` names it in the error.
absl::Status CheckJobId(std::string_view field, std::string_view id);

absl::Status Check(const v1::GetJobRequest& request);
absl::Status Check(const v1::CancelJobRequest& request);  // reason: ≤ 1 KiB, no control characters but \t and \n
absl::Status Check(const v1::WatchJobRequest& request);   // from_seq ≥ 0
// dp in [1, spec::kMaxWorldSize]; the job's own bounds are ResizePolicy's.
absl::Status Check(const v1::ResizeJobRequest& request);
absl::Status Check(const v1::ListJobsRequest& request);  // known states, each once; limit in [0, 1000]
// Sweeps. A sweep id is a job id's form ("sweep-<n>"). SubmitSweepRequest: at most
// kMaxSweepAxes axes, each key and value at most kMaxSweepValueBytes; the spec core
// checks the rest (keys, values, the number of points).
inline constexpr int kMaxSweepAxes = 64;
inline constexpr std::size_t kMaxSweepValueBytes = 4096;
absl::Status Check(const v1::SubmitSweepRequest& request);
absl::Status Check(const v1::GetSweepRequest& request);
absl::Status Check(const v1::ListSweepsRequest& request);  // limit in [0, 1000]
absl::Status Check(const v1::CancelSweepRequest& request);  // reason as CancelJobRequest's
// A sweep id: 1..kMaxJobIdBytes printable ASCII bytes. `field` names it in the error.
absl::Status CheckSweepId(std::string_view field, std::string_view id);
// timeout_s finite, in [0, 3600] (0: kDefaultCheckpointTimeoutS).
absl::Status Check(const v1::CheckpointJobRequest& request);
// name as common/worker_identity.h says; reason as CancelJobRequest's.
absl::Status Check(const v1::CordonWorkerRequest& request);
absl::Status Check(const v1::DrainWorkerRequest& request);

inline constexpr double kDefaultCheckpointTimeoutS = 300;
inline constexpr double kMaxCheckpointTimeoutS = 3600;

// WorkerService. Register: name and address as common/worker_identity.h says, device "", "cpu" or "cuda", at most 4096
// reported attempts with valid job ids, attempts >= 1 and ranks in [0, 65536), and its
// GPUs, engine and NCCL settings as device_validation.h says. The slot and port ranges
// are the registry's.
absl::Status Check(const v1::Register& request);
// EventBatch: at most 10,000 events (a worker sends 64); more ends the stream.
absl::Status Check(const v1::EventBatch& request);

// Why a worker's event cannot be stored, or "" when it can: a valid job id, attempt
// >= 1, rank in [0, 65536), at most 1 MiB serialized, and a payload a worker may
// report (not a JobStateChange, which only the controller writes). The manager drops
// such an event and counts it (trainyard_events_dropped_total{reason="invalid"}) but
// still acknowledges its batch: refusing the batch would make the worker resend it
// forever and hold back every event behind it.
// A CheckpointSaved must also hold ranges that need no job (CheckpointProblem), and so
// must a Validation (ValidationProblem).
std::string InvalidEvent(const v1::Event& event);

// Why a CheckpointSaved's fields are out of range, or "": step >= 1; path non-empty,
// at most spec::kMaxPathLength bytes of UTF-8 without control characters; bytes >= 0;
// blocked_ms and write_ms finite and >= 0; dp, tp, ep in [1, spec::kMaxWorldSize].
// Whether it fits its job (steps, directory, newer than the last) is event_fencing's.
std::string CheckpointProblem(const v1::CheckpointSaved& checkpoint);
// Why a CheckpointsPruned's fields are out of range, or "": step >= 1, byte counts and
// kept >= 0, each removed checkpoint's path as CheckpointProblem's, step >= 1, bytes >= 0.
std::string CheckpointsPrunedProblem(const v1::CheckpointsPruned& pruned);

// Why a Validation's fields are out of range, or "": step >= 0 (0: before the first
// step), tokens >= 0, ms finite and >= 0. The loss may be NaN or infinite: a diverged
// model's validation loss is a real outcome, stored and shown as the StepMetrics loss
// is, while a negative count or duration can only come from a broken rank.
std::string ValidationProblem(const v1::Validation& validation);

}  // namespace trainyard::request_validation
