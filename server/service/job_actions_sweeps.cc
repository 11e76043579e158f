// JobActions for sweeps: the same rules as for one job (roles, visibility, the audit
// row written ahead), applied to a sweep as a whole.
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "server/policy/request_validation.h"
#include "server/service/job_actions.h"
#include "server/service/unary_call.h"

namespace trainyard {
namespace {

std::vector<std::string> ChildIds(const v1::SweepView& view) {
  return {view.sweep().job_ids().begin(), view.sweep().job_ids().end()};
}

}  // namespace

absl::StatusOr<v1::SweepView> JobActions::SubmitSweep(const Caller& caller, Via via,
                                                      const v1::SubmitSweepRequest& request) {
  v1::AuditRecord row = Row(caller, via, "submit_sweep", request.spec().job().name(), "", "");
  if (auto s = request_validation::Check(request); !s.ok()) return Refuse(std::move(row), s);
  if (auto s = CheckSubmitRights(caller, request.spec()); !s.ok()) return Refuse(std::move(row), s);
  TY_ASSIGN_OR_RETURN(const int64_t id, Begin(std::move(row)));
  JobManager::OwnerFilter may_see = [caller](const std::string& owner) { return Authorizer::CanSee(caller, owner); };
  // Each child as a job of its own: a swept job.priority or job.preemptible meets the
  // same rights as a submitted one.
  JobManager::ChildCheck check = [caller](const v1::JobSpec& child) -> absl::Status {
    TY_RETURN_IF_ERROR(CheckSubmitRights(caller, child));
    if (child.compile().preflight()) {
      // A preflight of every point would hold the controller's preflight slot for
      // minutes; one point's preflight answers for the structure of all of them.
      return absl::InvalidArgumentError(
          "compile.preflight is not run for sweeps: check one point with "
          "`trainyard preflight FILE --set KEY=VALUE`, then submit the sweep without it");
    }
    return absl::OkStatus();
  };
  auto view = manager_->SubmitSweep(request, caller.owner, may_see, spec::kDefaultMaxSweepPoints, check);
  if (view.ok()) {
    Finish(id, absl::OkStatus(),
           absl::StrCat("created ", view->sweep().id(), " with ", view->sweep().job_ids_size(), " jobs"),
           ChildIds(*view));
  } else {
    Finish(id, view.status(), "");
  }
  return view;
}

absl::StatusOr<v1::SweepView> JobActions::GetSweep(const Caller& caller, const std::string& id) const {
  v1::GetSweepRequest request;
  request.set_id(id);
  TY_RETURN_IF_ERROR(request_validation::Check(request));
  // The owner first, from memory: an unseen sweep is refused before the store is read,
  // so no store error can tell it from a sweep that does not exist.
  const std::optional<std::string> owner = manager_->SweepOwner(id);
  if (!owner || !Authorizer::CanSee(caller, *owner)) {
    // Word for word what JobManager::GetSweep says of a sweep that does not exist.
    return absl::NotFoundError(absl::StrCat("sweep ", id, " not found"));
  }
  return manager_->GetSweep(id);
}

std::vector<v1::SweepView> JobActions::ListSweeps(const Caller& caller, int limit) const {
  // A submitter lists only its own sweeps; the filter comes before the limit.
  return manager_->ListSweeps(limit, caller.role == Role::kSubmitter ? caller.owner : "");
}

absl::StatusOr<v1::SweepView> JobActions::CancelSweep(const Caller& caller, Via via,
                                                      const v1::CancelSweepRequest& request) {
  v1::AuditRecord row = Row(caller, via, "cancel_sweep", request.id(), "", request.reason());
  if (auto s = request_validation::Check(request); !s.ok()) return Refuse(std::move(row), s);
  if (caller.role == Role::kViewer) return Refuse(std::move(row), Denied(caller, "cancel jobs", "submitter or admin"));
  const std::optional<std::string> owner = manager_->SweepOwner(request.id());
  if (!owner || !Authorizer::CanSee(caller, *owner)) {
    return Refuse(std::move(row), absl::NotFoundError(absl::StrCat("sweep ", request.id(), " not found")));
  }
  if (!Authorizer::CanCancel(caller, *owner)) {
    return Refuse(std::move(row), Denied(caller, "cancel this sweep", "its owner or admin"));
  }
  TY_ASSIGN_OR_RETURN(const int64_t id, Begin(std::move(row)));
  auto view = manager_->CancelSweep(request.id(), request.reason());
  if (view.ok()) {
    Finish(id, absl::OkStatus(), absl::StrCat("cancelled ", view->sweep().id()), ChildIds(*view));
  } else {
    Finish(id, view.status(), "");
  }
  return view;
}

}  // namespace trainyard
