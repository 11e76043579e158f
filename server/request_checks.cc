#include "server/request_checks.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/spec/spec_error.h"

namespace trainyard::request_checks {
namespace {

absl::Status Invalid(std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(std::string(field) + ": " + std::string(what));
}

}  // namespace

absl::Status CheckJobId(std::string_view field, std::string_view id) {
  if (id.empty()) return Invalid(field, "is empty; give a job id such as job-1");
  if (id.size() > kMaxJobIdBytes) {
    return Invalid(field, absl::StrCat("is ", id.size(), " bytes, more than the ", kMaxJobIdBytes,
                                       " a job id can have: ", spec::Quote(id)));
  }
  for (unsigned char c : id) {
    if (c < 0x21 || c > 0x7e) return Invalid(field, absl::StrCat("is not a job id: ", spec::Quote(id)));
  }
  return absl::OkStatus();
}

absl::Status Check(const v1::GetJobRequest& request) { return CheckJobId("GetJobRequest.id", request.id()); }

absl::Status Check(const v1::CancelJobRequest& request) {
  if (auto s = CheckJobId("CancelJobRequest.id", request.id()); !s.ok()) return s;
  const std::string& reason = request.reason();
  if (reason.size() > kMaxCancelReasonBytes) {
    return Invalid("CancelJobRequest.reason", absl::StrCat("is ", reason.size(), " bytes, more than the ",
                                                           kMaxCancelReasonBytes, " allowed: ",
                                                           spec::Quote(reason)));
  }
  for (unsigned char c : reason) {
    if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) {
      return Invalid("CancelJobRequest.reason", absl::StrCat("holds a control character: ", spec::Quote(reason)));
    }
  }
  return absl::OkStatus();
}

absl::Status Check(const v1::WatchJobRequest& request) {
  if (auto s = CheckJobId("WatchJobRequest.id", request.id()); !s.ok()) return s;
  if (request.from_seq() < 0) {
    return Invalid("WatchJobRequest.from_seq", absl::StrCat("must be >= 0 (0 or 1: from the start), got ",
                                                            request.from_seq()));
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

}  // namespace trainyard::request_checks
