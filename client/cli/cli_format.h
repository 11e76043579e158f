#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/status/statusor.h"
#include "client/job_watch.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard::cli {

// Exit codes of the `trainyard` CLI: one table for every command (printed by
// `trainyard --help`, see ExitCodeTable). Scripts can tell "the job did not succeed"
// from "the CLI could not find out".
inline constexpr int kExitOk = 0;         // done; watch/wait: the job SUCCEEDED
inline constexpr int kExitJobFailed = 1;  // watch/wait: FAILED or CANCELLED; preflight: findings
inline constexpr int kExitUsage = 2;      // bad flags, arguments, job file or value (INVALID_ARGUMENT)
inline constexpr int kExitNotFound = 3;   // no such job, artifact or file (NOT_FOUND)
inline constexpr int kExitDenied = 4;     // UNAUTHENTICATED or PERMISSION_DENIED
inline constexpr int kExitUnavailable = 5;  // controller unreachable, UNAVAILABLE, deadline passed
inline constexpr int kExitError = 6;      // anything else: refused (FAILED_PRECONDITION...), internal

// The exit code of a failed call or local step, by its status code (see above).
int ExitCodeForStatus(const absl::Status& status);
// The table above as `--help` prints it, one "  N  meaning" line each, newline-ended.
std::string ExitCodeTable();

// `rows` as columns separated by two spaces, each as wide as its widest cell (in
// characters of UTF-8); the last column is not padded and no line ends in spaces. Each
// row ends with a newline.
std::string FormatColumns(const std::vector<std::vector<std::string>>& rows);

// IsTerminal (client/job_watch.h) says which states end a job.
// kExitOk for SUCCEEDED, kExitJobFailed for FAILED or CANCELLED, else kExitError.
int WatchExitCode(v1::Job::State state);

// "running", "RUNNING" -> Job::RUNNING. INVALID_ARGUMENT listing the known states.
absl::StatusOr<v1::Job::State> ParseJobState(std::string_view name);
std::string StateName(v1::Job::State state);

// One human-readable line (no newline) per event, e.g.
//   seq=12 rank=0 step 5 loss=6.8123 grad_norm=1.23 lr=4.0e-04 tok/s=1520 step_ms=1340 epoch=2
//   seq=13 rank=0 validation step 5 loss=6.9012 tokens=8192 ms=41
//   seq=1 job PENDING: needs 2 slots...
//   seq=3 rank=1 RUNNING pid=1234 on worker w1
std::string FormatEventText(const v1::Event& event);

// Aligned columns with a header: ID NAME STATE WORLD OWNER REASON, where REASON is the
// pending reason while PENDING and the failure reason otherwise. Ends with a newline.
std::string FormatJobsTable(const std::vector<v1::Job>& jobs);
// What `trainyard get` and `explain` add below a job: its last checkpoint and the
// cause of each failed attempt, oldest first, e.g.
//   last checkpoint: step 150 at /ckpt/job-3/step-150 (attempt 2, 4096 bytes)
//   failure causes (oldest first):
//     1. rank 1 on worker w1 failed: exit code 1: ...
// "" when it has neither. Ends with a newline otherwise.
std::string FormatJobDetails(const v1::Job& job);
// `trainyard workers`' table: FormatWorkersTable in client/cli/gpu_format.h.

// NAME KIND ATTEMPT RANK SIZE SHA256 TIME: RANK "-" for a worker's own file (rank -1),
// SIZE in B/KiB/MiB/GiB, the first 12 hex digits of SHA256, TIME in UTC
// (2026-12-01T04:12:05Z, "-" when unset). Ends with a newline.
std::string FormatArtifactsTable(const std::vector<v1::ArtifactInfo>& artifacts);
// 512 -> "512 B", 1536 -> "1.5 KiB", 3 << 20 -> "3.0 MiB".
std::string FormatBytes(int64_t bytes);

// `text` made safe to write to a terminal: log lines, reasons and messages come from
// ranks and controllers, and an escape sequence in them (ESC, CSI, a carriage return,
// C1 controls, bidi overrides) would otherwise move the cursor, recolour or retitle
// the user's terminal, or hide text. Printable ASCII, tab and valid UTF-8 are kept;
// "\n" and "\r" are written as those two characters (a newline is kept as is with
// `keep_newlines`, for multi-line output the CLI formats itself); any other control
// byte and every byte of invalid UTF-8 becomes \xNN; C1 controls (U+0080..U+009F) and
// bidi controls (U+202A..U+202E, U+2066..U+2069) become \uNNNN.
std::string TerminalSafe(absl::string_view text, bool keep_newlines = false);

// "trainyard: INVALID_ARGUMENT: <message>" (no newline; the message TerminalSafe,
// newlines kept).
std::string FormatError(const absl::Status& status);

// What to add to an UNAVAILABLE or DEADLINE_EXCEEDED error of a call to `controller`
// (`tls`: the CLI connected with --tls-ca), read from gRPC's message:
//   connection refused      " (nothing listens at ADDR: is the controller running, and is
//                           --controller right?)": a TLS hint would only mislead;
//   plaintext, the peer closed or reset the connection (a TLS port answers a plaintext
//                           client so) " (controller at ADDR; plaintext: a controller that
//                           serves TLS needs --tls-ca)";
//   TLS, "wrong version number" (the port speaks plaintext), "certificate verify
//                           failed" (another CA, or a certificate not for ADDR), another
//                           handshake failure: which, and what to change;
//   anything else           " (controller at ADDR)".
std::string UnreachableHint(const absl::Status& status, const std::string& controller, bool tls);

// `trainyard explain`: why `job` is where it is. For a PENDING job: the scheduler's
// sentence, its place among the `pending` jobs (scheduling order: priority, then
// submission), its estimated start relative to `now`, the slots reserved for it and the
// fleet's free slots (and free GPUs of the workers that offer them; "cordoned" after a
// cordoned worker's). The place is Job.share's queue_position (the controller's order,
// fair share among equal priority) when set. For any other state, a line saying where it
// runs (with each rank's GPU and the workers' NCCL settings, FormatPlacementGpus) or how
// it ended. Then, for every state, the owner's quota and usage (FormatShare, when the
// controller sent Job.share) and FormatJobDetails.
std::string FormatExplain(const v1::Job& job, const std::vector<v1::Job>& pending,
                          const std::vector<v1::WorkerInfo>& workers, absl::Time now);
// Its 1-based place in scheduling order (priority, then submission) among `pending`, or
// 0 when it is not there: what explain shows when the controller sends no queue_position.
int QueuePosition(const v1::Job& job, const std::vector<v1::Job>& pending);

// "w1×4, w2×2": how many ranks each worker holds, workers in first-rank order.
std::string CountWorkers(const std::vector<std::string>& rank_workers);

}  // namespace trainyard::cli
