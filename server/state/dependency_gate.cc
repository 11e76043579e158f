#include "server/state/dependency_gate.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

using spec::AfterCondition;
using spec::AfterEntry;

std::string StateName(const v1::Job& job) { return v1::Job::State_Name(job.state()); }

// The parsed job.after of `job`; an unparsable list (a store edited by hand: every
// stored spec passed the rules) reads as `why`.
std::optional<std::vector<AfterEntry>> AfterOf(const v1::Job& job, std::string* why) {
  auto parsed = spec::ParseAfter(job.spec().job().after());
  if (!parsed.ok()) {
    if (why) *why = parsed.error().message;
    return std::nullopt;
  }
  return std::move(parsed).value();
}

}  // namespace

DependencyGate::DependencyGate(JobStateMachine* jobs) : jobs_(jobs) {
  jobs_->AddEndedListener([this](const TrackedJob& ended, Effects* fx) {
    // The ended job's dependents: a scan like every scheduling pass's, since jobs are
    // few enough for that and an index would be one more thing to rebuild on restart.
    for (auto& [id, rt] : jobs_->jobs()) {
      if (rt.job.state() != v1::Job::PENDING || rt.job.spec().job().after().empty()) continue;
      const std::string& after = rt.job.spec().job().after();
      if (after.find(ended.job.id()) == std::string::npos) continue;  // cheap pre-filter
      FailIfUnsatisfiable(rt, fx);
    }
  });
}

DependencyGate::Verdict DependencyGate::Judge(const TrackedJob* dep, AfterCondition condition) {
  if (dep == nullptr) return Verdict::kNever;
  const v1::Job::State s = dep->job.state();
  const bool ended = JobStateMachine::IsTerminal(s);
  switch (condition) {
    case AfterCondition::kSucceeded:
      return s == v1::Job::SUCCEEDED ? Verdict::kHolds : ended ? Verdict::kNever : Verdict::kWaits;
    case AfterCondition::kFailed:
      return s == v1::Job::FAILED ? Verdict::kHolds : ended ? Verdict::kNever : Verdict::kWaits;
    case AfterCondition::kEnded:
      return ended ? Verdict::kHolds : Verdict::kWaits;
    case AfterCondition::kStarted:
      return dep->job.has_start_time() ? Verdict::kHolds : ended ? Verdict::kNever : Verdict::kWaits;
  }
  return Verdict::kWaits;
}

std::string DependencyGate::NeverReason(const TrackedJob* dep, const AfterEntry& entry) {
  const std::string goal = spec::AfterConditionGoal(entry.condition);
  if (dep == nullptr) {
    return absl::StrCat("dependency ", entry.job, " does not exist; job.after needed it ", goal);
  }
  const bool never_ran = entry.condition == AfterCondition::kStarted;
  return absl::StrCat("dependency ", entry.job, " ended ", StateName(dep->job), never_ran ? " without starting" : "",
                      "; job.after needed it ", goal);
}

std::optional<std::string> DependencyGate::Hold(const TrackedJob& rt, const QueuedJob&, absl::Time) {
  const std::string& text = rt.job.spec().job().after();
  if (text.empty()) return std::nullopt;
  std::string why;
  const auto after = AfterOf(rt.job, &why);
  if (!after) return absl::StrCat("job.after cannot be read: ", why);
  std::optional<std::string> first;
  int more = 0;
  for (const AfterEntry& e : *after) {
    const TrackedJob* dep = jobs_->Find(e.job);
    const Verdict v = Judge(dep, e.condition);
    if (v == Verdict::kHolds) continue;
    if (first) {
      ++more;
      continue;
    }
    // kNever is failed by the ended-job listener in the same write; until then it
    // waits like the rest.
    first = dep == nullptr ? absl::StrCat("waiting for ", e.job, " ", spec::AfterConditionGoal(e.condition), " (",
                                          e.job, " does not exist)")
                           : absl::StrCat("waiting for ", e.job, " ", spec::AfterConditionGoal(e.condition), " (",
                                          e.job, " is ", StateName(dep->job), ")");
  }
  if (!first) return std::nullopt;
  if (more > 0) absl::StrAppend(&*first, " and ", more, more == 1 ? " more job" : " more jobs");
  return first;
}

void DependencyGate::FailIfUnsatisfiable(TrackedJob& rt, Effects* fx) {
  std::string why;
  const auto after = AfterOf(rt.job, &why);
  if (!after) {
    jobs_->SetState(rt, v1::Job::FAILED, absl::StrCat("job.after cannot be read: ", why), fx);
    return;
  }
  for (const AfterEntry& e : *after) {
    const TrackedJob* dep = jobs_->Find(e.job);
    if (Judge(dep, e.condition) != Verdict::kNever) continue;
    // SetState tells the ended-job listeners, so the failure runs down the chain.
    jobs_->SetState(rt, v1::Job::FAILED, NeverReason(dep, e), fx);
    return;
  }
}

void DependencyGate::FailUnsatisfiable(Effects* fx) {
  std::vector<std::string> waiting;
  for (const auto& [id, rt] : jobs_->jobs()) {
    if (rt.job.state() == v1::Job::PENDING && !rt.job.spec().job().after().empty()) waiting.push_back(id);
  }
  for (const std::string& id : waiting) {
    TrackedJob* rt = jobs_->Find(id);
    // An earlier failure's listener may have failed it already.
    if (rt != nullptr && rt->job.state() == v1::Job::PENDING) FailIfUnsatisfiable(*rt, fx);
  }
}

absl::Status DependencyGate::CheckNew(const v1::JobSpec& spec,
                                      const std::function<bool(const std::string&)>& may_see) const {
  auto parsed = spec::ParseAfter(spec.job().after());
  if (!parsed.ok()) return absl::InvalidArgumentError(parsed.error().message);
  int depth = 1;
  for (const AfterEntry& e : parsed.value()) {
    const TrackedJob* dep = jobs_->Find(e.job);
    if (dep == nullptr || (may_see && !may_see(dep->job.owner()))) {
      // Word for word what JobManager::Get says of a job that does not exist, so a
      // submitter learns nothing of another owner's jobs.
      return absl::NotFoundError(absl::StrCat("job.after: job ", e.job, " not found"));
    }
    if (Judge(dep, e.condition) == Verdict::kNever) {
      return absl::FailedPreconditionError(
          absl::StrCat("job.after: ", e.job, " already ended ", StateName(dep->job),
                       e.condition == AfterCondition::kStarted ? " without starting" : "", ", so it can never be ",
                       spec::AfterConditionName(e.condition)));
    }
    std::string why;
    const std::optional<int> d = Depth(e.job, &why);
    if (!d) return absl::FailedPreconditionError(absl::StrCat("job.after: ", e.job, ": ", why));
    depth = std::max(depth, *d + 1);
  }
  if (depth > spec::kMaxDependencyDepth) {
    return absl::InvalidArgumentError(absl::StrCat("job.after: this job would end a chain of ", depth,
                                                   " dependent jobs, over the limit of ", spec::kMaxDependencyDepth));
  }
  return absl::OkStatus();
}

std::optional<int> DependencyGate::Depth(const std::string& id, std::string* why) const {
  std::map<std::string, int> memo;
  std::set<std::string> path;
  return DepthOf(id, &memo, &path, why);
}

std::optional<int> DependencyGate::DepthOf(const std::string& id, std::map<std::string, int>* memo,
                                           std::set<std::string>* path, std::string* why) const {
  if (auto it = memo->find(id); it != memo->end()) return it->second;
  const TrackedJob* rt = jobs_->Find(id);
  if (rt == nullptr) return 1;  // a dependency that is gone ends its chain
  if (!path->insert(id).second) {
    *why = absl::StrCat("the dependencies run in a cycle through ", id);
    return std::nullopt;
  }
  int depth = 1;
  const auto after = AfterOf(rt->job, why);
  if (!after) return std::nullopt;
  for (const AfterEntry& e : *after) {
    const std::optional<int> d = DepthOf(e.job, memo, path, why);
    if (!d) return std::nullopt;
    depth = std::max(depth, *d + 1);
  }
  path->erase(id);
  (*memo)[id] = depth;
  return depth;
}

}  // namespace trainyard
