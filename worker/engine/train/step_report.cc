#include "worker/engine/train/step_report.h"

#include <sys/resource.h>

#include <algorithm>
#include <utility>

#include "worker/engine/base/host_sync.h"
#include "worker/engine/train/gemm_peak_probe.h"

namespace trainyard::engine {

PeakFlops::PeakFlops(double flops, c10::Device device, c10::ScalarType dtype)
    : PeakFlops(flops, [device, dtype] { return GemmPeakProbe::MeasureFlops(0.6, device, dtype); }) {}

PeakFlops::PeakFlops(double flops, Probe probe) : flops_(flops), probe_(std::move(probe)) {}

void PeakFlops::BeforeStep(int step) {
  if (step != kReprobeStep || flops_ <= 0) return;
  // The start-up probe may have run while the machine was still busy (controller,
  // worker and ranks loading); a peak measured low reports MFU > 1. Probe again once
  // the job is running, outside the step's time, and keep the higher figure.
  flops_ = std::max(flops_, probe_());
}

double PeakFlops::Mfu(int step, double achieved) {
  if (flops_ <= 0) return 0.0;
  if (achieved > flops_) {
    // More than the peak proves the peak was measured low (a busy moment of the
    // machine): measure again, after the step's time, at most every few steps.
    if (!futile_ && step >= next_reprobe_) {
      const double measured = probe_();
      flops_ = std::max(flops_, measured);
      next_reprobe_ = step + kReprobeInterval;
      // The probe's multiply cannot reach what the model's own GEMMs did (another
      // kernel for their shapes, such as LibTorch's bf16 loop on small operands): more
      // probes would only cost time.
      futile_ = measured < achieved;
    }
    // What a step did is a lower bound of the peak, so MFU stays at most 1.
    if (futile_) flops_ = std::max(flops_, achieved);
  }
  return achieved / flops_;
}

double PeakRssMb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

void SetExpertLoad(const torch::Tensor& global_counts, v1::StepMetrics& m) {
  if (global_counts.numel() == 0) return;
  HostRead read("expert load metrics");
  auto load = global_counts.sum(0).round().to(torch::kCPU, torch::kInt64).contiguous();
  m.mutable_expert_load()->Add(load.data_ptr<int64_t>(), load.data_ptr<int64_t>() + load.numel());
  const double mean = load.to(torch::kFloat64).mean().item<double>();
  const double max = load.max().item<int64_t>();
  m.set_imbalance(mean > 0 ? max / mean : 0.0);
}

std::string DescribeGradientReduction(const std::vector<std::unique_ptr<GradientSynchronizer>>& syncs,
                                      const FullyShardedParameters* fsdp, const ParallelContext& ctx) {
  std::string line = "gradient reduction:";
  for (const auto& sync : syncs) {
    const std::string name = sync->group().name().empty() ? std::string("group") : sync->group().name();
    if (sync->group().world_size() == 1) {
      line += " " + name + " 1 rank, not reduced;";
    } else {
      line += " " + name + " " + std::to_string(sync->bucket_count()) + " buckets, " +
              (sync->overlap() ? std::to_string(sync->started_in_backward()) + " started during backward;"
                               : std::string("reduced after backward;"));
    }
  }
  if (fsdp != nullptr) {
    line += " fsdp: dp_shard=" + std::to_string(ctx.dp_shard) + ", " + std::to_string(fsdp->unit_count()) + " units, " +
            (fsdp->prefetch() ? "all-gathers started at the step's start (prefetch)"
                              : "each unit's all-gather started when forward reaches it") +
            ";";
  }
  return line;
}

}  // namespace trainyard::engine
