#include "server/metrics/gpu_metrics.h"

#include <cmath>
#include <limits>

namespace trainyard {

GpuMetrics::GpuMetrics(prometheus::Registry& registry) {
  const std::pair<const char*, const char*> defs[kKinds] = {
      {"trainyard_worker_gpu_utilization_ratio", "Share of the last sample period a kernel ran on the GPU (0..1)"},
      {"trainyard_worker_gpu_memory_used_bytes", "GPU memory in use"},
      {"trainyard_worker_gpu_memory_total_bytes", "GPU memory in total"},
      {"trainyard_worker_gpu_power_watts", "GPU power draw"},
      {"trainyard_worker_gpu_temperature_celsius", "GPU temperature"},
      {"trainyard_worker_gpu_ecc_uncorrected_errors", "Volatile uncorrectable ECC errors since the driver loaded"},
      {"trainyard_worker_gpu_xid_errors", "Critical XID events the worker saw since it started"},
      {"trainyard_worker_gpu_healthy",
       "1 while the controller places ranks on the GPU, 0 once it reported an uncorrectable ECC error, a critical XID "
       "or fell off the bus (until the worker re-registers)"},
  };
  for (int k = 0; k < kKinds; ++k) {
    families_[k] = &prometheus::BuildGauge().Name(defs[k].first).Help(defs[k].second).Register(registry);
  }
}

void GpuMetrics::SetLocked(Series& s, Kind kind, const std::string& worker, int gpu, std::optional<double> value) {
  if (!value || !std::isfinite(*value) || *value < 0) {  // -1: not reported
    if (s[kind] != nullptr) families_[kind]->Remove(s[kind]);
    s[kind] = nullptr;
    return;
  }
  if (s[kind] == nullptr) s[kind] = &families_[kind]->Add({{"worker", worker}, {"gpu", std::to_string(gpu)}});
  s[kind]->Set(*value);
}

void GpuMetrics::RemoveLocked(Series& s) {
  for (int k = 0; k < kKinds; ++k) {
    if (s[k] != nullptr) families_[k]->Remove(s[k]);
    s[k] = nullptr;
  }
}

void GpuMetrics::SetWorker(const std::string& worker, const std::vector<GpuReading>& gpus) {
  absl::MutexLock lock(&mu_);
  std::map<int, const GpuReading*> by_index;
  for (const auto& g : gpus) by_index[g.index] = &g;
  for (auto it = series_.lower_bound({worker, std::numeric_limits<int>::min()}); it != series_.end() && it->first.first == worker;) {
    if (by_index.count(it->first.second)) {
      ++it;
      continue;
    }
    RemoveLocked(it->second);
    it = series_.erase(it);
  }
  for (const auto& [index, g] : by_index) {
    Series& s = series_.try_emplace({worker, index}, Series{}).first->second;
    const v1::GpuSample* x = g->sample ? &*g->sample : nullptr;
    auto from = [&](auto get) -> std::optional<double> {
      if (x == nullptr) return std::nullopt;
      return static_cast<double>(get(*x));
    };
    SetLocked(s, kUtil, worker, index, from([](const v1::GpuSample& v) { return v.utilization(); }));
    SetLocked(s, kMemUsed, worker, index, from([](const v1::GpuSample& v) { return v.memory_used_bytes(); }));
    SetLocked(s, kMemTotal, worker, index,
              g->memory_total_bytes > 0 ? std::optional<double>(static_cast<double>(g->memory_total_bytes)) : std::nullopt);
    SetLocked(s, kPower, worker, index, from([](const v1::GpuSample& v) { return v.power_watts(); }));
    SetLocked(s, kTemp, worker, index, from([](const v1::GpuSample& v) { return v.temperature_celsius(); }));
    SetLocked(s, kEcc, worker, index, from([](const v1::GpuSample& v) { return v.ecc_uncorrected(); }));
    SetLocked(s, kXid, worker, index, from([](const v1::GpuSample& v) { return v.xid_errors(); }));
    SetLocked(s, kHealthy, worker, index, g->healthy ? 1.0 : 0.0);
  }
}

void GpuMetrics::RemoveWorker(const std::string& worker) { SetWorker(worker, {}); }

}  // namespace trainyard
