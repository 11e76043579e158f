#include "server/service/job_actions.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/text.h"
#include "common/job_file.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/time_util.h"
#include "server/policy/request_validation.h"
#include "server/service/unary_call.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

using google::protobuf::util::TimeUtil;

// Valid UTF-8 (what a proto string must be) of at most kMaxAuditFieldBytes, cut on a
// character boundary.
std::string SafeField(std::string_view text) {
  std::string out = ToValidUtf8(text);
  if (out.size() <= kMaxAuditFieldBytes) return out;
  size_t cut = kMaxAuditFieldBytes;
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
  out.resize(cut);
  return out + "…";
}

std::string OutcomeOf(const absl::Status& status) {
  return status.ok() ? "OK" : absl::StatusCodeToString(status.code());
}

}  // namespace

const char* ViaName(Via via) {
  switch (via) {
    case Via::kGrpc:
      return "grpc";
    case Via::kWeb:
      return "web";
    case Via::kSignal:
      return "signal";
  }
  return "";
}

JobActions::JobActions(JobManager* manager, PreflightGate* preflight, AuditStore* audit, Clock* clock)
    : manager_(manager), preflight_(preflight), audit_(audit), clock_(clock) {}

absl::StatusOr<v1::Job> JobActions::VisibleJob(const Caller& caller, const std::string& id) const {
  auto job = manager_->Get(id);
  if (job.ok() && !Authorizer::CanSee(caller, job->owner())) {
    // Word for word what JobManager::Get says of a job that does not exist.
    return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  }
  return job;
}

v1::AuditRecord JobActions::Row(const Caller& caller, Via via, const char* action, std::string_view target,
                                std::string_view job_id, std::string_view reason) const {
  v1::AuditRecord row;
  row.set_identity(SafeField(caller.owner));
  row.set_role(RoleName(caller.role));
  row.set_action(action);
  row.set_target(SafeField(target));
  row.set_job_id(SafeField(job_id));
  row.set_reason(SafeField(reason));
  row.set_via(ViaName(via));
  return row;
}

absl::StatusOr<int64_t> JobActions::Begin(v1::AuditRecord record) {
  if (audit_ == nullptr) return 0;
  *record.mutable_time() = TimeUtil::MillisecondsToTimestamp(absl::ToUnixMillis(clock_->Now()));
  if (record.outcome().empty()) record.set_outcome(kAuditPending);
  record.set_message(SafeField(record.message()));
  auto id = audit_->AppendAudit(record);
  if (!id.ok()) {
    spdlog::error("audit log: a {} by {} was refused: its audit row cannot be written: {}", record.action(),
                  record.identity(), std::string(id.status().message()));
    return absl::UnavailableError(
        absl::StrCat("the controller cannot write its audit log, so it makes no change (", id.status().message(), ")"));
  }
  return *id;
}

void JobActions::Finish(int64_t id, const absl::Status& outcome, const std::string& message,
                        const std::vector<std::string>& job_ids) {
  if (audit_ == nullptr || id == 0) return;
  const std::string text = SafeField(outcome.ok() ? message : std::string(outcome.message()));
  if (auto s = audit_->FinishAudit(id, OutcomeOf(outcome), text, job_ids); !s.ok()) {
    // The row stays PENDING: the change happened (or not) and the row says "unknown".
    spdlog::error("audit log: row {} keeps outcome PENDING: {}", id, std::string(s.message()));
  }
}

absl::Status JobActions::Refuse(v1::AuditRecord row, const absl::Status& status) {
  row.set_outcome(OutcomeOf(status));
  row.set_message(std::string(status.message()));
  Begin(std::move(row)).IgnoreError();  // logged; the refusal stands either way
  return status;
}

void JobActions::RecordRefusal(const Caller& caller, Via via, const char* action, std::string_view target,
                               const absl::Status& status) {
  Refuse(Row(caller, via, action, target, "", ""), status).IgnoreError();
}

void JobActions::RecordFileReload(const char* action, const std::string& file, const absl::Status& outcome) {
  v1::AuditRecord row;
  row.set_identity("operator");
  row.set_action(action);
  row.set_target(SafeField(file));
  row.set_via(ViaName(Via::kSignal));
  row.set_outcome(OutcomeOf(outcome));
  row.set_message(outcome.ok() ? "file re-read" : std::string(outcome.message()));
  Begin(std::move(row)).IgnoreError();
}

absl::Status JobActions::CheckSubmitRights(const Caller& caller, const v1::JobSpec& spec) {
  if (!Authorizer::CanSubmit(caller)) return Denied(caller, "submit jobs", "submitter or admin");
  const v1::JobMeta& meta = spec.job();
  if (meta.has_preemptible() && !meta.preemptible() && meta.priority() > 0 &&
      !Authorizer::CanSubmitNonPreemptible(caller)) {
    return Denied(caller,
                  absl::StrCat("submit a job with job.preemptible = false above priority 0 (this one has priority ",
                               meta.priority(), ")")
                      .c_str(),
                  "admin");
  }
  return absl::OkStatus();
}

void JobActions::Submit(const Caller& caller, Via via, v1::JobSpec spec, std::shared_ptr<std::atomic<bool>> cancelled,
                        JobDone done) {
  v1::AuditRecord row = Row(caller, via, "submit", spec.job().name(), "", "");
  if (auto s = CheckSubmitRights(caller, spec); !s.ok()) return done(Refuse(std::move(row), s));
  auto id = Begin(std::move(row));
  if (!id.ok()) return done(id.status());
  SubmitAudited(caller, std::move(spec), std::move(cancelled), *id, std::move(done));
}

void JobActions::SubmitAudited(const Caller& caller, v1::JobSpec spec, std::shared_ptr<std::atomic<bool>> cancelled,
                               int64_t row, JobDone done) {
  auto finish = [this, row, done = std::move(done)](absl::StatusOr<v1::Job> job) {
    if (job.ok()) {
      Finish(row, absl::OkStatus(), absl::StrCat("created ", job->id()), {job->id()});
    } else {
      Finish(row, job.status(), "");
    }
    done(std::move(job));
  };
  // job.after may name only jobs the caller may see (a submitter's own).
  JobManager::OwnerFilter may_see = [caller](const std::string& owner) { return Authorizer::CanSee(caller, owner); };
  if (!spec.compile().preflight()) return finish(manager_->Submit(std::move(spec), caller.owner, may_see));
  // Refuse what Submit would refuse before spending a preflight on it.
  if (auto s = manager_->Validate(&spec, may_see); !s.ok()) return finish(s);
  preflight_->Check(
      spec, [cancelled] { return cancelled != nullptr && cancelled->load(); },
      [this, cancelled, spec, owner = caller.owner, may_see, finish = std::move(finish)](absl::Status status) {
        if (status.ok() && cancelled != nullptr && cancelled->load()) {
          status = absl::CancelledError("the client went away during the preflight");
        }
        if (!status.ok()) return finish(status);
        finish(manager_->Submit(spec, owner, may_see));
      });
}

void JobActions::Resubmit(const Caller& caller, Via via, const std::string& job_id,
                          const std::vector<std::string>& sets, std::shared_ptr<std::atomic<bool>> cancelled,
                          JobDone done) {
  v1::AuditRecord row = Row(caller, via, "resubmit", job_id, job_id, absl::StrJoin(sets, " "));
  if (auto s = request_validation::CheckJobId("job id", job_id); !s.ok()) {
    row.clear_job_id();  // not an id: naming no job, it is kept for the fixed time only
    return done(Refuse(std::move(row), s));
  }
  if (!Authorizer::CanSubmit(caller)) {
    return done(Refuse(std::move(row), Denied(caller, "resubmit jobs", "submitter or admin")));
  }
  if (sets.size() > kMaxResubmitSets) {
    return done(Refuse(std::move(row), absl::InvalidArgumentError(absl::StrCat(
                                           "set: ", sets.size(), " edits, over the limit of ", kMaxResubmitSets))));
  }
  auto old = VisibleJob(caller, job_id);
  if (!old.ok()) return done(Refuse(std::move(row), old.status()));
  // The stored spec as a JSON job file, then the edits through the CLI's own --set
  // reader: the same keys, types and messages as `trainyard submit --set`.
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string json;
  if (auto s = google::protobuf::util::MessageToJsonString(old->spec(), &json, options); !s.ok()) {
    return done(Refuse(std::move(row), absl::InternalError(absl::StrCat("the spec of ", job_id,
                                                                        " does not print as JSON: ", s.ToString()))));
  }
  auto spec = ParseJobToml(json, absl::StrCat(job_id, ".json"), sets);
  if (!spec.ok()) return done(Refuse(std::move(row), spec.status()));
  const v1::JobMeta& meta = spec->job();
  if (meta.has_preemptible() && !meta.preemptible() && meta.priority() > 0 &&
      !Authorizer::CanSubmitNonPreemptible(caller)) {
    return done(
        Refuse(std::move(row), Denied(caller, "submit a job with job.preemptible = false above priority 0", "admin")));
  }
  auto id = Begin(std::move(row));
  if (!id.ok()) return done(id.status());
  SubmitAudited(caller, std::move(*spec), std::move(cancelled), *id, std::move(done));
}

absl::StatusOr<v1::Job> JobActions::Cancel(const Caller& caller, Via via, const v1::CancelJobRequest& request) {
  v1::AuditRecord row = Row(caller, via, "cancel", request.id(), request.id(), request.reason());
  if (auto s = request_validation::Check(request); !s.ok()) {
    row.clear_job_id();
    return Refuse(std::move(row), s);
  }
  if (caller.role == Role::kViewer) return Refuse(std::move(row), Denied(caller, "cancel jobs", "submitter or admin"));
  auto visible = VisibleJob(caller, request.id());
  if (!visible.ok()) return Refuse(std::move(row), visible.status());
  if (!Authorizer::CanCancel(caller, visible->owner())) {
    return Refuse(std::move(row), Denied(caller, "cancel this job", "its owner or admin"));
  }
  TY_ASSIGN_OR_RETURN(const int64_t id, Begin(std::move(row)));
  auto job = manager_->Cancel(request.id(), request.reason());
  Finish(id, job.status(), job.ok() ? absl::StrCat("state ", v1::Job::State_Name(job->state())) : "");
  return job;
}

absl::StatusOr<v1::Job> JobActions::Resize(const Caller& caller, Via via, const v1::ResizeJobRequest& request) {
  v1::AuditRecord row =
      Row(caller, via, "resize", request.job_id(), request.job_id(), absl::StrCat("dp=", request.dp()));
  if (auto s = request_validation::Check(request); !s.ok()) {
    row.clear_job_id();
    return Refuse(std::move(row), s);
  }
  if (caller.role == Role::kViewer) return Refuse(std::move(row), Denied(caller, "resize jobs", "submitter or admin"));
  auto visible = VisibleJob(caller, request.job_id());
  if (!visible.ok()) return Refuse(std::move(row), visible.status());
  if (!Authorizer::CanCancel(caller, visible->owner())) {
    return Refuse(std::move(row), Denied(caller, "resize this job", "its owner or admin"));
  }
  TY_ASSIGN_OR_RETURN(const int64_t id, Begin(std::move(row)));
  auto job = manager_->Resize(request.job_id(), request.dp());
  Finish(id, job.status(), job.ok() ? absl::StrCat("state ", v1::Job::State_Name(job->state())) : "");
  return job;
}

void JobActions::Checkpoint(const Caller& caller, Via via, const v1::CheckpointJobRequest& request,
                            std::shared_ptr<std::atomic<bool>> gone, CheckpointDone done) {
  v1::AuditRecord row = Row(caller, via, "checkpoint", request.job_id(), request.job_id(), "");
  if (auto s = request_validation::Check(request); !s.ok()) {
    row.clear_job_id();
    return done(Refuse(std::move(row), s));
  }
  if (caller.role == Role::kViewer) {
    return done(Refuse(std::move(row), Denied(caller, "checkpoint jobs", "submitter or admin")));
  }
  auto visible = VisibleJob(caller, request.job_id());
  if (!visible.ok()) return done(Refuse(std::move(row), visible.status()));
  if (!Authorizer::CanCancel(caller, visible->owner())) {
    return done(Refuse(std::move(row), Denied(caller, "checkpoint this job", "its owner or admin")));
  }
  auto id = Begin(std::move(row));
  if (!id.ok()) return done(id.status());
  const double timeout_s =
      request.timeout_s() > 0 ? request.timeout_s() : request_validation::kDefaultCheckpointTimeoutS;
  manager_->RequestCheckpoint(
      request.job_id(), absl::Seconds(timeout_s),
      [this, id = *id, done = std::move(done)](absl::StatusOr<v1::CheckpointRef> ref) {
        Finish(id, ref.status(), ref.ok() ? absl::StrCat("checkpoint at step ", ref->step()) : "");
        done(std::move(ref));
      },
      std::move(gone));
}

absl::StatusOr<v1::WorkerInfo> JobActions::Cordon(const Caller& caller, Via via,
                                                  const v1::CordonWorkerRequest& request) {
  v1::AuditRecord row =
      Row(caller, via, request.cordon() ? "cordon" : "uncordon", request.name(), "", request.reason());
  if (auto s = request_validation::Check(request); !s.ok()) return Refuse(std::move(row), s);
  if (!Authorizer::CanManageFleet(caller)) {
    return Refuse(std::move(row), Denied(caller, request.cordon() ? "cordon workers" : "uncordon workers", "admin"));
  }
  TY_ASSIGN_OR_RETURN(const int64_t id, Begin(std::move(row)));
  auto worker = manager_->Cordon(request.name(), request.cordon(), request.reason());
  Finish(id, worker.status(), request.cordon() ? "cordoned" : "uncordoned");
  return worker;
}

absl::StatusOr<v1::DrainWorkerResponse> JobActions::Drain(const Caller& caller, Via via,
                                                          const v1::DrainWorkerRequest& request) {
  v1::AuditRecord row = Row(caller, via, "drain", request.name(), "", request.reason());
  if (auto s = request_validation::Check(request); !s.ok()) return Refuse(std::move(row), s);
  if (!Authorizer::CanManageFleet(caller)) return Refuse(std::move(row), Denied(caller, "drain workers", "admin"));
  TY_ASSIGN_OR_RETURN(const int64_t id, Begin(std::move(row)));
  auto drained = manager_->Drain(request.name(), request.reason());
  std::vector<std::string> moved;
  if (drained.ok()) moved.assign(drained->job_ids().begin(), drained->job_ids().end());
  Finish(id, drained.status(), absl::StrCat("moved ", Counted(static_cast<int64_t>(moved.size()), "job")), moved);
  return drained;
}

absl::StatusOr<std::vector<v1::AuditRecord>> JobActions::ListAudit(const Caller& caller,
                                                                   const v1::ListAuditRequest& request) {
  if (caller.role != Role::kAdmin) return Denied(caller, "read the audit log", "admin");
  AuditQuery query;
  if (!request.job_id().empty()) {
    TY_RETURN_IF_ERROR(request_validation::CheckJobId("ListAuditRequest.job_id", request.job_id()));
    query.job_id = request.job_id();
  }
  if (request.has_since()) {
    const auto& since = request.since();
    if (since.seconds() < 0 || since.nanos() < 0 || since.nanos() > 999999999 ||
        since.seconds() > TimeUtil::kTimestampMaxSeconds) {
      return absl::InvalidArgumentError(absl::StrCat("ListAuditRequest.since: ", since.seconds(), "s ", since.nanos(),
                                                     "ns is not a time from 1970 on"));
    }
    const int64_t since_ms = TimeUtil::TimestampToMilliseconds(since);
    const int64_t now_ms = absl::ToUnixMillis(clock_->Now());
    if (since_ms > now_ms) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ListAuditRequest.since: ", TimeUtil::ToString(since), " is in the future (the controller's time is ",
          TimeUtil::ToString(TimeUtil::MillisecondsToTimestamp(now_ms)), ")"));
    }
    query.since_ms = since_ms;
  }
  if (request.limit() < 0 || request.limit() > kMaxAuditLimit) {
    return absl::InvalidArgumentError(absl::StrCat("ListAuditRequest.limit: ", request.limit(), " is not in 0..",
                                                   kMaxAuditLimit, " (0: ", kDefaultAuditLimit, ")"));
  }
  query.limit = request.limit() == 0 ? kDefaultAuditLimit : request.limit();
  if (audit_ == nullptr) return std::vector<v1::AuditRecord>{};
  return audit_->ReadAudit(query);
}

std::vector<v1::AuditRecord> JobActions::StoppedBy(const std::string& job_id) const {
  std::vector<v1::AuditRecord> out;
  if (audit_ == nullptr) return out;
  AuditQuery query;
  query.job_id = job_id;
  query.limit = 64;
  auto rows = audit_->ReadAudit(query);
  if (!rows.ok()) {
    spdlog::warn("audit log: who stopped {} cannot be read: {}", job_id, std::string(rows.status().message()));
    return out;
  }
  for (auto it = rows->rbegin(); it != rows->rend(); ++it) {
    if (it->outcome() == "OK" && (it->action() == "cancel" || it->action() == "drain")) out.push_back(*it);
  }
  return out;
}

}  // namespace trainyard
