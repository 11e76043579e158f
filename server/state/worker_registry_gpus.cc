// WorkerRegistry's GPU part: the GPUs each worker registered, which rank holds each,
// their health from heartbeat samples, the newest samples, and the views built from
// them for the scheduler, admission, ListWorkers and the gauges.
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"
#include "server/state/worker_registry.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

constexpr size_t kMaxReasonBytes = 256;

// Drops what a sample cannot mean (stored as -1, "not reported"); returns the names of
// the fields dropped, "" when none.
std::string Sanitize(v1::GpuSample* s) {
  std::string dropped;
  auto drop = [&](const char* field) { absl::StrAppend(&dropped, dropped.empty() ? "" : ", ", field); };
  auto real = [&](double v, double max, const char* field, auto set) {
    if (v == -1) return;
    if (!std::isfinite(v) || v < 0 || v > max) {
      drop(field);
      set(-1);
    }
  };
  real(s->utilization(), 1.0, "utilization", [&](double v) { s->set_utilization(v); });
  real(s->power_watts(), 1e5, "power_watts", [&](double v) { s->set_power_watts(v); });
  real(s->temperature_celsius(), 1e3, "temperature_celsius", [&](double v) { s->set_temperature_celsius(v); });
  auto count = [&](int64_t v, const char* field, auto set) {
    if (v < -1) {
      drop(field);
      set(-1);
    }
  };
  count(s->memory_used_bytes(), "memory_used_bytes", [&](int64_t v) { s->set_memory_used_bytes(v); });
  count(s->ecc_uncorrected(), "ecc_uncorrected", [&](int64_t v) { s->set_ecc_uncorrected(v); });
  count(s->ecc_corrected(), "ecc_corrected", [&](int64_t v) { s->set_ecc_corrected(v); });
  count(s->xid_errors(), "xid_errors", [&](int64_t v) { s->set_xid_errors(v); });
  if (s->unhealthy_reason().size() > kMaxReasonBytes || !IsUtf8(s->unhealthy_reason())) {
    s->set_unhealthy_reason(Quote(s->unhealthy_reason()));  // printable ASCII, cut
  }
  return dropped;
}

}  // namespace

const v1::GpuDevice* WorkerRegistry::Device(const Worker& w, int index) const {
  for (const auto& g : w.reg.gpus()) {
    if (g.index() == index) return &g;
  }
  return nullptr;
}

void WorkerRegistry::AdoptGpus(Worker& w, const v1::Register& reg) {
  std::map<int, Fault> kept;
  for (auto& [index, fault] : w.faults) {
    const v1::GpuDevice* before = Device(w, index);
    for (const auto& g : reg.gpus()) {
      if (g.index() == index && (before == nullptr || before->uuid() == g.uuid())) {
        kept[index] = Fault{fault.reason, true};
      }
    }
  }
  w.faults = std::move(kept);
  w.samples.clear();
  w.warned_bad_sample = false;
}

std::vector<GpuFault> WorkerRegistry::Heartbeat(int64_t conn, const v1::Heartbeat& heartbeat) {
  std::vector<GpuFault> out;
  Worker* w = ByConn(conn);
  if (w == nullptr) return out;
  HeardFrom(w->reg.name(), *w, false);
  Resync(*w, heartbeat);
  std::set<int> seen;
  std::string problems;
  int problem_count = 0;
  auto problem = [&](const std::string& p) {
    if (problem_count++ < 4) absl::StrAppend(&problems, problems.empty() ? "" : "; ", p);
  };
  int read = 0;
  for (const auto& raw : heartbeat.gpus()) {
    // At most one sample per registered GPU is read: a heartbeat of many more is
    // hostile or broken, and scanning it all would hold the state lock.
    if (read++ == w->reg.gpus_size()) {
      problem(absl::StrCat(heartbeat.gpus_size() - w->reg.gpus_size(), " samples beyond the ",
                           w->reg.gpus_size(), " registered GPUs dropped"));
      break;
    }
    const v1::GpuDevice* device = Device(*w, raw.index());
    if (device == nullptr) {
      problem(absl::StrCat("a sample for GPU ", raw.index(), ", which it did not register, dropped"));
      continue;
    }
    if (!seen.insert(raw.index()).second) {
      problem(absl::StrCat("a second sample for GPU ", raw.index(), " dropped"));
      continue;
    }
    v1::GpuSample sample = raw;
    if (std::string dropped = Sanitize(&sample); !dropped.empty()) {
      problem(absl::StrCat("GPU ", raw.index(), ": ", dropped, " out of range, dropped"));
    }
    auto fault = w->faults.find(sample.index());
    if (!sample.healthy()) {
      if (fault == w->faults.end() || fault->second.carried) {
        const bool fresh = fault == w->faults.end();
        w->faults[sample.index()] = Fault{sample.unhealthy_reason(), false};
        if (fresh) {
          out.push_back({w->reg.name(), sample.index(), device->uuid(), sample.unhealthy_reason()});
          spdlog::error("worker={} GPU {} ({}) unhealthy: {}", w->reg.name(), sample.index(), device->uuid(),
                        sample.unhealthy_reason());
        }
      }
    } else if (fault != w->faults.end() && fault->second.carried) {
      spdlog::info("worker={} GPU {} reported healthy after re-registering: back in service", w->reg.name(),
                   sample.index());
      w->faults.erase(fault);
    }
    w->samples[sample.index()] = std::move(sample);
  }
  if (problem_count > 0 && !w->warned_bad_sample) {
    w->warned_bad_sample = true;
    spdlog::warn("worker={} heartbeat: {}{} (logged once per registration)", w->reg.name(), problems,
                 problem_count > 4 ? absl::StrCat("; and ", problem_count - 4, " more") : "");
  }
  return out;
}

WorkerSnapshot WorkerRegistry::SnapshotOf(const std::string& name, const Worker& w, bool idle) const {
  WorkerSnapshot s;
  s.name = name;
  s.free_slots = idle ? w.reg.slots() : FreeSlots(name);
  s.cordoned = !idle && cordons_.count(name) > 0;
  s.nvlink_topology_known = w.reg.nvlink_topology_known();
  s.engine_cuda = w.reg.capabilities().cuda();
  s.engine_cudagraph = w.reg.capabilities().cudagraph();
  s.engine_bf16 = w.reg.capabilities().bf16();
  for (const auto& g : w.reg.gpus()) {
    GpuView v;
    v.index = g.index();
    v.nvlink_domain = g.nvlink_domain();
    v.healthy = w.faults.count(g.index()) == 0;
    v.held = !idle && w.gpu_holds.count(g.index()) > 0;
    v.memory_bytes = g.memory_bytes();
    s.gpus.push_back(v);
  }
  return s;
}

std::vector<FleetWorker> WorkerRegistry::ConnectedFleet() const {
  std::vector<FleetWorker> out;
  for (const auto& [name, w] : workers_) {
    if (!w.connected) continue;
    FleetWorker f;
    f.name = name;
    f.libtorch_version = w.reg.capabilities().libtorch_version();
    f.cuda = w.reg.capabilities().cuda();
    f.cudagraph = w.reg.capabilities().cudagraph();
    f.bf16 = w.reg.capabilities().bf16();
    f.gpus = w.reg.gpus_size();
    for (const auto& g : w.reg.gpus()) {
      if (w.faults.count(g.index()) || g.memory_bytes() <= f.largest_gpu_memory_bytes) continue;
      f.largest_gpu_memory_bytes = g.memory_bytes();
      f.largest_gpu_index = g.index();
      f.largest_gpu_name = g.name();
    }
    out.push_back(std::move(f));
  }
  return out;
}

bool WorkerRegistry::HoldGpu(const std::string& worker, int index, const GpuHolder& holder) {
  Worker& w = workers_[worker];
  if (w.reg.name().empty()) w.reg.set_name(worker);  // recovery: known before it reconnects
  auto [it, inserted] = w.gpu_holds.emplace(index, holder);
  if (inserted) return true;
  if (it->second.job_id == holder.job_id && it->second.attempt == holder.attempt && it->second.rank == holder.rank) {
    return true;
  }
  spdlog::error("worker={} GPU {} asked for by job={} rank={} but held by job={} attempt={} rank={}", worker, index,
                holder.job_id, holder.rank, it->second.job_id, it->second.attempt, it->second.rank);
  return false;
}

void WorkerRegistry::ReleaseGpu(const std::string& worker, int index, const std::string& job_id) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  auto hold = it->second.gpu_holds.find(index);
  if (hold != it->second.gpu_holds.end() && hold->second.job_id == job_id) it->second.gpu_holds.erase(hold);
}

std::optional<GpuHolder> WorkerRegistry::GpuHeldBy(const std::string& worker, int index) const {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return std::nullopt;
  auto hold = it->second.gpu_holds.find(index);
  if (hold == it->second.gpu_holds.end()) return std::nullopt;
  return hold->second;
}

std::string WorkerRegistry::GpuUuid(const std::string& worker, int index) const {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return "";
  const v1::GpuDevice* d = Device(it->second, index);
  return d == nullptr ? "" : d->uuid();
}

bool WorkerRegistry::GpuHealthy(const std::string& worker, int index) const {
  auto it = workers_.find(worker);
  return it != workers_.end() && Device(it->second, index) != nullptr && it->second.faults.count(index) == 0;
}

std::vector<std::string> WorkerRegistry::NcclEnv(const std::string& worker) const {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return {};
  return {it->second.reg.nccl_env().begin(), it->second.reg.nccl_env().end()};
}

std::vector<WorkerRegistry::GpuState> WorkerRegistry::GpuStates(const std::string& worker) const {
  std::vector<GpuState> out;
  auto it = workers_.find(worker);
  if (it == workers_.end() || !it->second.connected) return out;
  const Worker& w = it->second;
  for (const auto& g : w.reg.gpus()) {
    GpuState s;
    s.device = g;
    s.healthy = w.faults.count(g.index()) == 0;
    if (auto sample = w.samples.find(g.index()); sample != w.samples.end()) s.sample = sample->second;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace trainyard
