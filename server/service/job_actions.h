// Every call that changes something, with its rules in one place for both front ends:
// the gRPC JobService and the web API (server/web/web_api.cc) call these, never the
// manager directly, so the roles, the request checks and the audit row are the same
// whichever way a change arrives.
//
// Each action: checks the request (request_validation), the caller's role
// (Authorizer::Can*), that the caller may see its job (another owner's job is NOT_FOUND
// for a submitter, with the very words of a missing job), then writes its audit row
// ahead (outcome PENDING; a store that cannot write it refuses the call UNAVAILABLE,
// so nothing unaudited happens), calls the manager and sets the row's outcome. A
// refusal before that (INVALID_ARGUMENT, PERMISSION_DENIED, NOT_FOUND,
// FAILED_PRECONDITION) is recorded too, in one write. Callers that are not
// authenticated are not recorded: they are no one (and could flood the log).
//
// A new mutating call (webhook changes, say) records itself through Begin/Finish.
//
// Thread-safe: it holds no state of its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "server/auth/authorizer.h"
#include "server/state/job_manager.h"
#include "server/state/preflight_gate.h"
#include "server/store/audit_store.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard {

// Which front end a call came through, as the audit row names it.
enum class Via { kGrpc, kWeb, kSignal };
const char* ViaName(Via via);

// The most `--set` edits one resubmit takes.
inline constexpr size_t kMaxResubmitSets = 64;
// ListAudit's default and largest page.
inline constexpr int kDefaultAuditLimit = 100;
inline constexpr int kMaxAuditLimit = 10000;

class JobActions {
 public:
  using JobDone = std::function<void(absl::StatusOr<v1::Job>)>;
  using CheckpointDone = std::function<void(absl::StatusOr<v1::CheckpointRef>)>;

  // Every pointer must outlive the actions; `audit` may be null (no audit log: tests
  // of the manager alone).
  JobActions(JobManager* manager, PreflightGate* preflight, AuditStore* audit, Clock* clock);

  // The job `id` if `caller` may see it; NOT_FOUND as for a missing job otherwise.
  absl::StatusOr<v1::Job> VisibleJob(const Caller& caller, const std::string& id) const;

  // SubmitJob. `done` runs exactly once: at once, or from the preflight gate's thread
  // when the spec sets compile.preflight (`cancelled` then stops it).
  void Submit(const Caller& caller, Via via, v1::JobSpec spec, std::shared_ptr<std::atomic<bool>> cancelled,
              JobDone done);
  // A new job from the spec of job `job_id` (which the caller must see) with `sets`
  // applied ("section.key=value", the CLI's --set, later wins), owned by the caller,
  // then as Submit. A bad edit is INVALID_ARGUMENT naming it, as the CLI's --set is.
  void Resubmit(const Caller& caller, Via via, const std::string& job_id, const std::vector<std::string>& sets,
                std::shared_ptr<std::atomic<bool>> cancelled, JobDone done);
  absl::StatusOr<v1::Job> Cancel(const Caller& caller, Via via, const v1::CancelJobRequest& request);
  absl::StatusOr<v1::Job> Resize(const Caller& caller, Via via, const v1::ResizeJobRequest& request);
  // `done` runs exactly once, possibly on the manager's thread.
  void Checkpoint(const Caller& caller, Via via, const v1::CheckpointJobRequest& request,
                  std::shared_ptr<std::atomic<bool>> gone, CheckpointDone done);
  absl::StatusOr<v1::WorkerInfo> Cordon(const Caller& caller, Via via, const v1::CordonWorkerRequest& request);
  absl::StatusOr<v1::DrainWorkerResponse> Drain(const Caller& caller, Via via, const v1::DrainWorkerRequest& request);

  // Sweeps. SubmitSweep: as Submit, for every point (a spec with compile.preflight is
  // refused: run `trainyard preflight` on one point); audited as "submit_sweep" with the
  // children's ids. GetSweep/ListSweeps: what the caller may see (a submitter: its own).
  // CancelSweep: the owner or an admin; audited as "cancel_sweep".
  absl::StatusOr<v1::SweepView> SubmitSweep(const Caller& caller, Via via, const v1::SubmitSweepRequest& request);
  absl::StatusOr<v1::SweepView> GetSweep(const Caller& caller, const std::string& id) const;
  std::vector<v1::SweepView> ListSweeps(const Caller& caller, int limit) const;
  absl::StatusOr<v1::SweepView> CancelSweep(const Caller& caller, Via via, const v1::CancelSweepRequest& request);

  // A request of `action` refused before it could be read (a body that does not parse).
  void RecordRefusal(const Caller& caller, Via via, const char* action, std::string_view target,
                     const absl::Status& status);
  // A file re-read on SIGHUP by the controller's operator: `action` is "policy_reload"
  // (--policy-file) or "webhooks_reload" (--webhooks, the webhook endpoints).
  void RecordFileReload(const char* action, const std::string& file, const absl::Status& outcome);

  // ListAudit: admin only; since not in the future, limit 0..kMaxAuditLimit, job_id a
  // valid id (a job that does not exist, or no longer does, just has no rows).
  absl::StatusOr<std::vector<v1::AuditRecord>> ListAudit(const Caller& caller, const v1::ListAuditRequest& request);
  // The accepted cancel and drain rows naming `job_id`, oldest first (GetJob's
  // Job.stopped_by); empty without an audit log.
  std::vector<v1::AuditRecord> StoppedBy(const std::string& job_id) const;

  // The audit seam. Begin commits `record` (time, outcome PENDING and safe strings
  // filled in) and returns its id, or the UNAVAILABLE the call must be refused with;
  // 0 without an audit log. Finish sets the outcome of row `id` (not 0).
  absl::StatusOr<int64_t> Begin(v1::AuditRecord record);
  void Finish(int64_t id, const absl::Status& outcome, const std::string& message,
              const std::vector<std::string>& job_ids = {});

 private:
  // A row for `caller` doing `action` on `target`.
  v1::AuditRecord Row(const Caller& caller, Via via, const char* action, std::string_view target,
                      std::string_view job_id, std::string_view reason) const;
  // Records `status` (a refusal) in `row` and returns it.
  absl::Status Refuse(v1::AuditRecord row, const absl::Status& status);
  // Whether `caller` may submit `spec`: the role, and job.preemptible = false above
  // priority 0 for admins only. PERMISSION_DENIED naming what is missing.
  static absl::Status CheckSubmitRights(const Caller& caller, const v1::JobSpec& spec);
  // Submit once the row is begun.
  void SubmitAudited(const Caller& caller, v1::JobSpec spec, std::shared_ptr<std::atomic<bool>> cancelled,
                     int64_t row, JobDone done);

  JobManager* const manager_;
  PreflightGate* const preflight_;
  AuditStore* const audit_;
  Clock* const clock_;
};

}  // namespace trainyard
