#include "server/state/sweep_gate.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard {

bool SweepGate::Active(v1::Job::State state) {
  return state == v1::Job::SCHEDULED || state == v1::Job::RUNNING || state == v1::Job::RESTARTING;
}

void SweepGate::BeginPass(absl::Time) {
  admitted_.clear();
  active_.clear();
  // One scan of the job table per pass, so a sweep of a thousand children costs a pass
  // O(jobs), not O(children^2).
  std::map<std::string, std::vector<std::pair<int, std::string>>> pending;
  for (const auto& [id, rt] : jobs_->jobs()) {
    const v1::Job& job = rt.job;
    if (job.sweep_id().empty()) continue;
    const v1::Sweep* sweep = Find(job.sweep_id());
    if (sweep == nullptr || sweep->max_concurrent() <= 0) continue;
    int& active = active_[job.sweep_id()];
    // A child cancelled or failed keeps its slots until its ranks are gone (live > 0).
    if (Active(job.state()) || rt.live > 0) ++active;
    if (job.state() == v1::Job::PENDING) pending[job.sweep_id()].emplace_back(job.sweep_index(), id);
  }
  for (auto& [sweep_id, children] : pending) {
    const int room = sweeps_.at(sweep_id).max_concurrent() - active_[sweep_id];
    if (room <= 0) continue;
    std::sort(children.begin(), children.end());
    const int let_in = std::min(room, static_cast<int>(children.size()));
    for (int i = 0; i < let_in; ++i) admitted_.insert(children[i].second);
    active_[sweep_id] += let_in;
  }
}

std::optional<std::string> SweepGate::Hold(const TrackedJob& rt, const QueuedJob&, absl::Time) {
  const v1::Job& job = rt.job;
  if (job.sweep_id().empty() || admitted_.count(job.id()) != 0) return std::nullopt;
  const v1::Sweep* sweep = Find(job.sweep_id());
  if (sweep == nullptr || sweep->max_concurrent() <= 0) return std::nullopt;
  const int taken = active_.count(job.sweep_id()) != 0 ? active_.at(job.sweep_id()) : 0;
  return absl::StrCat("sweep ", sweep->id(), ": ", taken, " of its children running or starting (max_concurrent ",
                      sweep->max_concurrent(), ")");
}

void SweepGate::Add(v1::Sweep sweep) {
  std::string id = sweep.id();
  sweeps_[std::move(id)] = std::move(sweep);
}

const v1::Sweep* SweepGate::Find(const std::string& id) const {
  auto it = sweeps_.find(id);
  return it == sweeps_.end() ? nullptr : &it->second;
}

}  // namespace trainyard
