#pragma once

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "trainyard/v1/device.pb.h"

namespace trainyard {

// One GPU of a worker as the controller sees it: its health (the controller's view,
// sticky for the registration), its total memory and its newest sample.
struct GpuReading {
  int index = 0;
  bool healthy = true;
  int64_t memory_total_bytes = 0;
  std::optional<v1::GpuSample> sample;
};

// The trainyard_worker_gpu_* gauges, labelled {worker, gpu} (gpu: the NVML index as a
// string): utilization_ratio, memory_used_bytes, memory_total_bytes, power_watts,
// temperature_celsius, ecc_uncorrected_errors, xid_errors (from the newest sample) and
// healthy (1/0). A value the worker does not report (-1) has no series. Thread-safe.
class GpuMetrics {
 public:
  explicit GpuMetrics(prometheus::Registry& registry);

  // The worker's GPUs now: series of GPUs not in `gpus` are removed.
  void SetWorker(const std::string& worker, const std::vector<GpuReading>& gpus);
  // Removes every series of the worker (it was lost).
  void RemoveWorker(const std::string& worker);

 private:
  enum Kind { kUtil, kMemUsed, kMemTotal, kPower, kTemp, kEcc, kXid, kHealthy, kKinds };
  using Series = std::array<prometheus::Gauge*, kKinds>;
  void SetLocked(Series& s, Kind kind, const std::string& worker, int gpu, std::optional<double> value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(Series& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::array<prometheus::Family<prometheus::Gauge>*, kKinds> families_{};
  absl::Mutex mu_;
  std::map<std::pair<std::string, int>, Series> series_ ABSL_GUARDED_BY(mu_);  // (worker, gpu)
};

}  // namespace trainyard
