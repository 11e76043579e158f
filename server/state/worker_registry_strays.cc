// WorkerRegistry: slots held by ranks no job counts any more (stray ranks) and by ranks
// the controller does not know of (a refused Assign), until the worker says they are
// gone.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/state/worker_registry.h"
#include "spdlog/spdlog.h"

namespace trainyard {

void WorkerRegistry::HoldStray(const std::string& worker, const StrayRank& rank) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  Worker& w = it->second;
  int gpu = rank.gpu;
  if (gpu >= 0 && !HoldGpu(worker, gpu, GpuHolder{rank.job_id, rank.attempt, rank.rank})) gpu = -1;
  w.strays[{rank.job_id, rank.attempt, rank.rank}] = gpu;
}

void WorkerRegistry::ReleaseStrayGpus(Worker& w) {
  for (const auto& [key, gpu] : w.strays) {
    auto hold = gpu >= 0 ? w.gpu_holds.find(gpu) : w.gpu_holds.end();
    if (hold != w.gpu_holds.end() && hold->second.job_id == std::get<0>(key) &&
        hold->second.attempt == std::get<1>(key) && hold->second.rank == std::get<2>(key)) {
      w.gpu_holds.erase(hold);
    }
  }
}

void WorkerRegistry::SetStrays(const std::string& worker, const std::vector<StrayRank>& ranks) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  ReleaseStrayGpus(it->second);
  it->second.strays.clear();
  for (const StrayRank& r : ranks) HoldStray(worker, r);
  if (!ranks.empty()) {
    spdlog::info("worker={} still runs {} rank(s) no job counts (told to stop them); their slots stay busy until "
                 "it reports them gone",
                 worker, ranks.size());
  }
}

bool WorkerRegistry::RankGone(const std::string& worker, const std::string& job_id, int attempt, int rank) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return false;
  Worker& w = it->second;
  auto stray = w.strays.find({job_id, attempt, rank});
  if (stray == w.strays.end()) return false;
  if (stray->second >= 0) {
    auto hold = w.gpu_holds.find(stray->second);
    if (hold != w.gpu_holds.end() && hold->second.job_id == job_id && hold->second.attempt == attempt &&
        hold->second.rank == rank) {
      w.gpu_holds.erase(hold);
    }
  }
  w.strays.erase(stray);
  return true;
}

int WorkerRegistry::StrayCount(const std::string& worker) const {
  auto it = workers_.find(worker);
  return it == workers_.end() ? 0 : static_cast<int>(it->second.strays.size());
}

void WorkerRegistry::AssignRefused(const std::string& worker) {
  auto it = workers_.find(worker);
  if (it == workers_.end() || it->second.resync) return;
  it->second.resync = true;
  spdlog::warn("worker={} refused an assignment for want of slots: it runs ranks this controller does not count; "
               "no new ranks there until a heartbeat reports its free slots",
               worker);
}

bool WorkerRegistry::Resyncing(const std::string& worker) const {
  auto it = workers_.find(worker);
  return it != workers_.end() && it->second.resync;
}

void WorkerRegistry::Resync(Worker& w, const v1::Heartbeat& heartbeat) {
  if (!w.resync) return;
  // Ranks assigned but not started yet, or ended but not yet reported, only make the
  // worker's count the larger: agreeing means it runs nothing the controller misses.
  const int counted = FreeSlots(w.reg.name());
  if (heartbeat.free_slots() < counted) return;
  w.resync = false;
  spdlog::info("worker={} reports {} free slot(s), as counted: takes new ranks again", w.reg.name(),
               heartbeat.free_slots());
}

}  // namespace trainyard
