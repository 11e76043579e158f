#include "server/policy/request_validation.h"

#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"
#include "common/spec/rules.h"
#include "common/spec/spec_error.h"
#include "common/worker_identity.h"
#include "server/policy/device_validation.h"

namespace trainyard::request_validation {
namespace {

absl::Status Invalid(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(std::string(field) + ": " + std::string(what));
}

}  // namespace

// A controller-made id ("job-<n>", "sweep-<n>"): 1..kMaxJobIdBytes printable ASCII bytes.
static absl::Status CheckId(std::string_view field, std::string_view id, const char* what, const char* example) {
  if (id.empty()) return Invalid(field, absl::StrCat("is empty; give a ", what, " such as ", example));
  if (id.size() > kMaxJobIdBytes) {
    return Invalid(field, absl::StrCat("is ", id.size(), " bytes, more than the ", kMaxJobIdBytes, " a ", what,
                                       " can have: ", Quote(id)));
  }
  for (unsigned char c : id) {
    if (c < 0x21 || c > 0x7e) return Invalid(field, absl::StrCat("is not a ", what, ": ", Quote(id)));
  }
  return absl::OkStatus();
}

absl::Status CheckJobId(std::string_view field, std::string_view id) { return CheckId(field, id, "job id", "job-1"); }

absl::Status Check(const v1::GetJobRequest& request) { return CheckJobId("GetJobRequest.id", request.id()); }

// A free-text reason a person gives (a cancel, a cordon, a drain).
static absl::Status CheckReason(std::string_view field, const std::string& reason) {
  if (reason.size() > kMaxCancelReasonBytes) {
    return Invalid(field, absl::StrCat("is ", reason.size(), " bytes, more than the ", kMaxCancelReasonBytes,
                                       " allowed: ", Quote(reason)));
  }
  for (unsigned char c : reason) {
    if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) {
      return Invalid(field, absl::StrCat("holds a control character: ", Quote(reason)));
    }
  }
  return absl::OkStatus();
}

absl::Status Check(const v1::CancelJobRequest& request) {
  if (auto s = CheckJobId("CancelJobRequest.id", request.id()); !s.ok()) return s;
  return CheckReason("CancelJobRequest.reason", request.reason());
}

absl::Status Check(const v1::CheckpointJobRequest& request) {
  if (auto s = CheckJobId("CheckpointJobRequest.job_id", request.job_id()); !s.ok()) return s;
  const double t = request.timeout_s();
  if (!std::isfinite(t) || t < 0 || t > kMaxCheckpointTimeoutS) {
    return Invalid("CheckpointJobRequest.timeout_s",
                   absl::StrCat("must be in [0, ", kMaxCheckpointTimeoutS, "] seconds (0: ", kDefaultCheckpointTimeoutS,
                                "), got ", t));
  }
  return absl::OkStatus();
}

absl::Status Check(const v1::CordonWorkerRequest& request) {
  if (std::string p = WorkerNameProblem(request.name()); !p.empty()) return Invalid("CordonWorkerRequest.name", p);
  return CheckReason("CordonWorkerRequest.reason", request.reason());
}

absl::Status Check(const v1::DrainWorkerRequest& request) {
  if (std::string p = WorkerNameProblem(request.name()); !p.empty()) return Invalid("DrainWorkerRequest.name", p);
  return CheckReason("DrainWorkerRequest.reason", request.reason());
}

absl::Status Check(const v1::WatchJobRequest& request) {
  if (auto s = CheckJobId("WatchJobRequest.id", request.id()); !s.ok()) return s;
  if (request.from_seq() < 0) {
    return Invalid("WatchJobRequest.from_seq",
                   absl::StrCat("must be >= 0 (0 or 1: from the start), got ", request.from_seq()));
  }
  return absl::OkStatus();
}

absl::Status Check(const v1::ResizeJobRequest& request) {
  if (auto s = CheckJobId("ResizeJobRequest.job_id", request.job_id()); !s.ok()) return s;
  if (request.dp() < 1 || request.dp() > spec::kMaxWorldSize) {
    return Invalid("ResizeJobRequest.dp",
                   absl::StrCat("must be in [1, ", spec::kMaxWorldSize,
                                "] (the data-parallel degree to restart at), got ", request.dp()));
  }
  return absl::OkStatus();
}

absl::Status Check(const v1::ListJobsRequest& request) {
  if (request.limit() < 0 || request.limit() > kMaxListLimit) {
    return Invalid("ListJobsRequest.limit",
                   absl::StrCat("must be in [0, ", kMaxListLimit, "] (0: the default 100), got ", request.limit()));
  }
  std::set<int> seen;
  for (int s : request.states()) {
    if (s == v1::Job::STATE_UNSPECIFIED || !v1::Job::State_IsValid(s)) {
      return Invalid("ListJobsRequest.states", absl::StrCat("has ", s, ", which is not a job state"));
    }
    if (!seen.insert(s).second) {
      return Invalid("ListJobsRequest.states", absl::StrCat("lists ", v1::Job::State_Name(s), " twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSweepId(std::string_view field, std::string_view id) {
  return CheckId(field, id, "sweep id", "sweep-1");
}

absl::Status Check(const v1::SubmitSweepRequest& request) {
  if (request.axes_size() > kMaxSweepAxes) {
    return Invalid("SubmitSweepRequest.axes",
                   absl::StrCat("has ", request.axes_size(), " axes, more than the ", kMaxSweepAxes, " allowed"));
  }
  for (int a = 0; a < request.axes_size(); ++a) {
    const v1::SweepAxis& axis = request.axes(a);
    const std::string field = absl::StrCat("SubmitSweepRequest.axes[", a, "]");
    if (axis.key().size() > kMaxSweepValueBytes) {
      return Invalid(field, absl::StrCat("key is ", axis.key().size(), " bytes, more than ", kMaxSweepValueBytes));
    }
    for (int i = 0; i < axis.values_size(); ++i) {
      if (axis.values(i).size() > kMaxSweepValueBytes) {
        return Invalid(field, absl::StrCat("value ", i + 1, " is ", axis.values(i).size(), " bytes, more than ",
                                           kMaxSweepValueBytes));
      }
    }
  }
  if (request.max_concurrent() < 0) {
    return Invalid("SubmitSweepRequest.max_concurrent",
                   absl::StrCat("must be >= 0 (0: no limit), got ", request.max_concurrent()));
  }
  return absl::OkStatus();
}

absl::Status Check(const v1::GetSweepRequest& request) { return CheckSweepId("GetSweepRequest.id", request.id()); }

absl::Status Check(const v1::ListSweepsRequest& request) {
  if (request.limit() < 0 || request.limit() > kMaxListLimit) {
    return Invalid("ListSweepsRequest.limit",
                   absl::StrCat("must be in [0, ", kMaxListLimit, "] (0: the default 100), got ", request.limit()));
  }
  return absl::OkStatus();
}

absl::Status Check(const v1::CancelSweepRequest& request) {
  if (auto s = CheckSweepId("CancelSweepRequest.id", request.id()); !s.ok()) return s;
  return CheckReason("CancelSweepRequest.reason", request.reason());
}

namespace {

absl::Status CheckRank(std::string_view field, int rank) {
  if (rank < 0 || rank >= spec::kMaxWorldSize) {
    return Invalid(field, absl::StrCat("must be in [0, ", spec::kMaxWorldSize, "), got ", rank));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Check(const v1::Register& request) {
  if (std::string p = WorkerNameProblem(request.name()); !p.empty()) return Invalid("Register.name", p);
  if (std::string p = WorkerAddressProblem(request.address()); !p.empty()) return Invalid("Register.address", p);
  const std::string& device = request.device();
  if (!device.empty() && device != "cpu" && device != "cuda") {
    return Invalid("Register.device", absl::StrCat("must be \"cpu\" or \"cuda\", got ", Quote(device)));
  }
  if (request.memory_bytes() < 0) {
    return Invalid("Register.memory_bytes", absl::StrCat("must be >= 0, got ", request.memory_bytes()));
  }
  if (request.running_size() > kMaxRunningAttempts) {
    return Invalid("Register.running", absl::StrCat("lists ", request.running_size(), " attempts, more than the ",
                                                    kMaxRunningAttempts, " allowed"));
  }
  for (const auto& a : request.running()) {
    if (auto s = CheckJobId("Register.running.job_id", a.job_id()); !s.ok()) return s;
    if (a.attempt() < 1) return Invalid("Register.running.attempt", absl::StrCat("must be >= 1, got ", a.attempt()));
    if (a.ranks_size() > spec::kMaxWorldSize) {
      return Invalid("Register.running.ranks", absl::StrCat("lists ", a.ranks_size(), " ranks"));
    }
    for (int r : a.ranks()) {
      if (auto s = CheckRank("Register.running.ranks", r); !s.ok()) return s;
    }
  }
  return CheckDevices(request);
}

absl::Status Check(const v1::EventBatch& request) {
  if (request.events_size() > kMaxBatchEvents) {
    return Invalid("EventBatch.events",
                   absl::StrCat("has ", request.events_size(), " events, more than the ", kMaxBatchEvents, " allowed"));
  }
  return absl::OkStatus();
}

std::string InvalidEvent(const v1::Event& e) {
  if (auto s = CheckJobId("job_id", e.job_id()); !s.ok()) return std::string(s.message());
  if (e.attempt() < 1) return absl::StrCat("attempt must be >= 1, got ", e.attempt());
  if (auto s = CheckRank("rank", e.rank()); !s.ok()) return std::string(s.message());
  if (e.payload_case() == v1::Event::PAYLOAD_NOT_SET) return "no payload";
  if (e.has_job_state()) return "a JobStateChange, which only the controller writes";
  if (const std::size_t bytes = e.ByteSizeLong(); bytes > kMaxEventBytes) {
    return absl::StrCat(bytes, " bytes, more than the ", kMaxEventBytes, " allowed");
  }
  if (e.has_checkpoint()) return CheckpointProblem(e.checkpoint());
  if (e.has_checkpoints_pruned()) return CheckpointsPrunedProblem(e.checkpoints_pruned());
  if (e.has_validation()) return ValidationProblem(e.validation());
  return "";
}

std::string ValidationProblem(const v1::Validation& v) {
  if (v.step() < 0) return absl::StrCat("validation.step must be >= 0, got ", v.step());
  if (v.tokens() < 0) return absl::StrCat("validation.tokens must be >= 0, got ", v.tokens());
  if (!std::isfinite(v.ms()) || v.ms() < 0) {
    return absl::StrCat("validation.ms must be a finite number >= 0, got ", v.ms());
  }
  return "";
}

namespace {

// Why a checkpoint directory's path named `field` cannot be stored and shown, or "".
std::string CheckpointPathProblem(const std::string& field, const std::string& path) {
  if (path.empty()) return field + " is empty";
  if (path.size() > spec::kMaxPathLength) {
    return absl::StrCat(field, " is ", path.size(), " bytes, more than the ", spec::kMaxPathLength,
                        " allowed: ", Quote(path));
  }
  if (!IsUtf8(path)) return absl::StrCat(field, " is not UTF-8: ", Quote(path));
  for (unsigned char c : path) {
    if (c < 0x20 || c == 0x7f) return absl::StrCat(field, " holds a control character: ", Quote(path));
  }
  return "";
}

}  // namespace

std::string CheckpointsPrunedProblem(const v1::CheckpointsPruned& p) {
  if (p.step() < 1) return absl::StrCat("checkpoints_pruned.step must be >= 1, got ", p.step());
  for (const auto& [name, n] : {std::pair<const char*, int64_t>{"checkpoints_pruned.bytes_freed", p.bytes_freed()},
                                {"checkpoints_pruned.bytes_kept", p.bytes_kept()},
                                {"checkpoints_pruned.kept", p.kept()}}) {
    if (n < 0) return absl::StrCat(name, " must be >= 0, got ", n);
  }
  for (const v1::CheckpointRef& r : p.removed()) {
    if (std::string why = CheckpointPathProblem("checkpoints_pruned.removed.path", r.path()); !why.empty()) return why;
    if (r.step() < 1) return absl::StrCat("checkpoints_pruned.removed.step must be >= 1, got ", r.step());
    if (r.bytes() < 0) return absl::StrCat("checkpoints_pruned.removed.bytes must be >= 0, got ", r.bytes());
  }
  return "";
}

std::string CheckpointProblem(const v1::CheckpointSaved& ck) {
  if (ck.step() < 1) return absl::StrCat("checkpoint.step must be >= 1, got ", ck.step());
  if (std::string why = CheckpointPathProblem("checkpoint.path", ck.path()); !why.empty()) return why;
  // The engine writes at most this many bytes of a metric's name into a manifest.
  if (ck.metric_name().size() > 64 || !IsUtf8(ck.metric_name())) {
    return absl::StrCat("checkpoint.metric_name must be UTF-8 of at most 64 bytes, got ", Quote(ck.metric_name()));
  }
  if (ck.bytes() < 0) return absl::StrCat("checkpoint.bytes must be >= 0, got ", ck.bytes());
  for (const auto& [name, ms] : {std::pair<const char*, double>{"checkpoint.blocked_ms", ck.blocked_ms()},
                                 {"checkpoint.write_ms", ck.write_ms()}}) {
    if (!std::isfinite(ms) || ms < 0) return absl::StrCat(name, " must be a finite number >= 0, got ", ms);
  }
  for (const auto& [name, n] : {std::pair<const char*, int>{"checkpoint.dp", ck.dp()},
                                {"checkpoint.tp", ck.tp()},
                                {"checkpoint.ep", ck.ep()}}) {
    if (n < 1 || n > spec::kMaxWorldSize) {
      return absl::StrCat(name, " must be in [1, ", spec::kMaxWorldSize, "], got ", n);
    }
  }
  return "";
}

}  // namespace trainyard::request_validation
