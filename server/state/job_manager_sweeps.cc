// JobManager's sweeps (job arrays; docs/sweeps.md): a sweep is expanded, every point
// normalised and admitted, and the sweep stored with all its children in one
// transaction; its children then run through the queue like any job, at most
// max_concurrent at a time (SweepGate). Reads rank the children by their newest
// validation loss, read from the store outside both locks.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/proto_time.h"
#include "common/spec_proto.h"
#include "server/state/job_manager.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

// "sweep-12" -> 12, for newest-first order (the ids' text order puts sweep-10 first).
int64_t SweepNumber(const std::string& id) {
  const size_t dash = id.rfind('-');
  return dash == std::string::npos ? 0 : std::strtoll(id.c_str() + dash + 1, nullptr, 10);
}

// Ranks by last validation loss, lowest first, ties by index; children without one (or
// with a NaN loss) get 0.
void Rank(v1::SweepView* view) {
  std::vector<v1::SweepChild*> ranked;
  for (v1::SweepChild& c : *view->mutable_children()) {
    c.set_rank(0);
    // A NaN loss ranks nowhere (and would break the sort's order).
    if (c.has_last_validation() && !std::isnan(c.last_validation().loss())) ranked.push_back(&c);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const v1::SweepChild* a, const v1::SweepChild* b) {
    if (a->last_validation().loss() != b->last_validation().loss()) {
      return a->last_validation().loss() < b->last_validation().loss();
    }
    return a->index() < b->index();
  });
  for (size_t i = 0; i < ranked.size(); ++i) ranked[i]->set_rank(static_cast<int>(i) + 1);
}

// `status` of point i of n, naming the point as the spec core's errors do.
absl::Status PointError(const absl::Status& status, size_t i, size_t n, const std::string& label) {
  return absl::Status(status.code(), absl::StrCat("sweep point ", i, " of ", n, " (", label, "): ", status.message()));
}

}  // namespace

absl::StatusOr<v1::SweepView> JobManager::SubmitSweep(const v1::SubmitSweepRequest& request, const std::string& owner,
                                                      const OwnerFilter& may_see, std::size_t max_points,
                                                      const ChildCheck& check_child) {
  std::vector<spec::SweepAxisText> axes;
  for (const v1::SweepAxis& a : request.axes()) {
    axes.push_back({a.key(), std::vector<std::string>(a.values().begin(), a.values().end())});
  }
  spec::Result<spec::Sweep> sweep = spec::SweepFromText(axes, request.max_concurrent(), max_points);
  if (!sweep.ok()) return Reject(SpecErrorToStatus(sweep.error()));
  spec::Result<spec::SpecInput> base = InputFromProto(request.spec());
  if (!base.ok()) return Reject(SpecErrorToStatus(base.error()));
  spec::Result<std::vector<spec::SweepPoint>> points = spec::ExpandSweep(base.value(), sweep.value(), max_points);
  if (!points.ok()) return Reject(SpecErrorToStatus(points.error()));

  FleetView fleet;
  {
    absl::MutexLock lock(&mu_);
    fleet = FleetLocked();
  }
  const absl::Time now = clock_->Now();
  const size_t n = points.value().size();
  std::vector<v1::Job> jobs;
  std::vector<std::vector<v1::Event>> first(n, std::vector<v1::Event>(1));
  jobs.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const spec::SweepPoint& p = points.value()[i];
    auto admitted = AdmissionPolicy::Admit(ProtoFromInput(p.input), fleet);
    absl::Status status = admitted.status();
    if (status.ok() && check_child) status = check_child(*admitted);
    if (!status.ok()) return Reject(PointError(status, i, n, p.label));
    v1::Job job = JobStateMachine::NewJob(std::move(*admitted), owner, now, &first[i][0]);
    job.set_sweep_index(static_cast<int>(i));
    job.set_sweep_label(p.label);
    jobs.push_back(std::move(job));
  }
  v1::Sweep stored;
  stored.set_owner(owner);
  // The children's name without "-0": the job's name, or the default the spec gave it.
  const std::string& first_name = jobs.front().spec().job().name();
  stored.set_name(first_name.substr(0, first_name.size() - 2));
  stored.set_max_concurrent(sweep.value().max_concurrent);
  // The axes as the controller typed them, so `get` shows 0.0001 for 1e-4.
  for (const spec::SweepAxis& a : sweep.value().axes) {
    v1::SweepAxis* axis = stored.add_axes();
    axis->set_key(a.field->path());
    for (const spec::FieldValue& v : a.values) axis->add_values(spec::SweepValueText(v));
  }
  *stored.mutable_create_time() = ToProtoTime(now);

  absl::MutexLock commit(&commit_mu_);
  {
    // Under the commit lock, as Submit: no dependency ends between this check and the
    // children joining the table. Each child's own job.after: it may be swept.
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < n; ++i) {
      if (auto s = dependencies_->CheckNew(jobs[i].spec(), may_see); !s.ok()) {
        return Reject(PointError(s, i, n, jobs[i].sweep_label()));
      }
    }
  }
  // The sweep, every child row and its PENDING event, in one transaction.
  TY_RETURN_IF_ERROR(store_->CreateSweep(&stored, &jobs, &first));
  const std::string sweep_id = stored.id();
  Effects fx;
  for (const v1::Job& job : jobs) fx.Notify(job.id());
  spdlog::info("sweep={} owner={} stored with {} children (max_concurrent {})", sweep_id, owner, n,
               stored.max_concurrent());
  Write(
      [&](Effects*) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        for (size_t i = 0; i < n; ++i) {
          const std::string id = jobs[i].id();
          JobView view{jobs[i], 0, first[i].empty() ? 0 : first[i].back().seq()};
          view.order = jobs_.Add(std::move(jobs[i]));
          views_[id] = std::move(view);
        }
        sweeps_->Add(stored);
        return absl::OkStatus();
      },
      std::move(fx))
      .IgnoreError();  // the sweep exists; a failed placement write is logged
  absl::MutexLock lock(&mu_);
  return SweepViewLocked(sweep_id, /*with_children=*/true);
}

v1::SweepView JobManager::SweepViewLocked(const std::string& id, bool with_children) {
  const v1::Sweep& sweep = *sweeps_->Find(id);
  v1::SweepView view;
  *view.mutable_sweep() = sweep;
  bool ended = true;
  for (const std::string& job_id : sweep.job_ids()) {
    auto it = views_.find(job_id);
    if (it == views_.end()) continue;  // not possible: a sweep and its jobs are stored together
    const v1::Job& job = it->second.job;
    (*view.mutable_states())[v1::Job::State_Name(job.state())] += 1;
    if (!JobStateMachine::IsTerminal(job.state())) ended = false;
    if (!with_children) continue;
    v1::SweepChild* child = view.add_children();
    child->set_job_id(job.id());
    child->set_index(job.sweep_index());
    child->set_label(job.sweep_label());
    child->set_state(job.state());
    child->set_reason(job.state() == v1::Job::PENDING ? job.pending_reason() : job.failure_reason());
    if (const TrackedJob* rt = jobs_.Find(job_id)) child->set_last_step(rt->last_step);
  }
  view.set_ended(ended);
  return view;
}

std::optional<std::string> JobManager::SweepOwner(const std::string& id) {
  absl::MutexLock lock(&mu_);
  const v1::Sweep* sweep = sweeps_->Find(id);
  if (sweep == nullptr) return std::nullopt;
  return sweep->owner();
}

absl::StatusOr<v1::SweepView> JobManager::GetSweep(const std::string& id) {
  v1::SweepView view;
  {
    absl::MutexLock lock(&mu_);
    if (sweeps_->Find(id) == nullptr) return absl::NotFoundError(absl::StrCat("sweep ", id, " not found"));
    view = SweepViewLocked(id, /*with_children=*/true);
  }
  // Outside the state lock: one indexed read per child, never while a writer waits.
  for (v1::SweepChild& child : *view.mutable_children()) {
    auto last = store_->LastEventOfKind(child.job_id(), v1::Event::kValidation);
    if (!last.ok()) {
      // A compacted child has no events left; the others' ranking still stands.
      if (last.status().code() != absl::StatusCode::kFailedPrecondition) return last.status();
      continue;
    }
    if (last->has_value()) *child.mutable_last_validation() = (*last)->validation();
  }
  Rank(&view);
  return view;
}

std::vector<v1::SweepView> JobManager::ListSweeps(int limit, const std::string& owner) {
  absl::MutexLock lock(&mu_);
  std::vector<const v1::Sweep*> rows;
  for (const auto& [id, sweep] : sweeps_->sweeps()) {
    if (owner.empty() || sweep.owner() == owner) rows.push_back(&sweep);
  }
  std::sort(rows.begin(), rows.end(),
            [](const v1::Sweep* a, const v1::Sweep* b) { return SweepNumber(a->id()) > SweepNumber(b->id()); });
  if (limit <= 0) limit = 100;
  std::vector<v1::SweepView> out;
  for (const v1::Sweep* sweep : rows) {
    if (static_cast<int>(out.size()) >= limit) break;
    out.push_back(SweepViewLocked(sweep->id(), /*with_children=*/false));
  }
  return out;
}

absl::StatusOr<v1::SweepView> JobManager::CancelSweep(const std::string& id, const std::string& reason) {
  absl::MutexLock commit(&commit_mu_);
  TY_RETURN_IF_ERROR(Write([&](Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const v1::Sweep* sweep = sweeps_->Find(id);
    if (sweep == nullptr) return absl::NotFoundError(absl::StrCat("sweep ", id, " not found"));
    const std::string why = absl::StrCat("cancelled with its sweep ", id, reason.empty() ? "" : ": ", reason);
    // Every child in this one op, before the pass that follows it: none is placed
    // between two cancels.
    for (const std::string& job_id : sweep->job_ids()) {
      const TrackedJob* rt = jobs_.Find(job_id);
      if (rt == nullptr || JobStateMachine::IsTerminal(rt->job.state())) continue;
      TY_RETURN_IF_ERROR(jobs_.Cancel(job_id, why, fx));
    }
    return absl::OkStatus();
  }));
  absl::MutexLock lock(&mu_);
  return SweepViewLocked(id, /*with_children=*/true);
}

}  // namespace trainyard
