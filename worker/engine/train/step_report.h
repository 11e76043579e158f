// What rank 0 reports of a step beyond its loss, kept out of the step itself: the MFU
// against a GEMM peak that is measured again when the machine proved it low, the
// experts' load, the process's peak RSS, and the first step's line on how gradients
// were reduced. Not thread-safe; the Trainer owns one PeakFlops.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "trainyard/v1/event.pb.h"
#include "worker/engine/parallel/fully_sharded.h"
#include "worker/engine/parallel/gradient_synchronizer.h"
#include "worker/engine/parallel/mesh/parallel_context.h"

namespace trainyard::engine {

// The denominator of MFU: a measured GEMM peak (gemm_peak_probe.h) of this rank's device
// and compute dtype, 0 when unknown (MFU then reports 0).
class PeakFlops {
 public:
  // Before this step the peak is measured again and the higher of the two kept.
  static constexpr int kReprobeStep = 3;
  // A step faster than the peak re-measures it, at most once per this many steps, until
  // a re-measure falls short of the step (then the step's rate is the peak).
  static constexpr int kReprobeInterval = 5;

  // Measures a peak in FLOP/s; called outside any step's time.
  using Probe = std::function<double()>;

  // Re-measures with GemmPeakProbe::MeasureFlops on `device` in `dtype`.
  PeakFlops(double flops, c10::Device device, c10::ScalarType dtype);
  // Re-measures with `probe` (tests give one that counts the calls and scripts the
  // figures).
  PeakFlops(double flops, Probe probe);

  // Call before `step` starts (outside its time).
  void BeforeStep(int step);
  // The MFU of a step that achieved `achieved` FLOP/s; call after the step's time ends,
  // since a re-measure runs here. At most 1 once a re-measure proved futile.
  double Mfu(int step, double achieved);

 private:
  double flops_;
  Probe probe_;
  int next_reprobe_ = 0;  // first step that may re-measure a peak it beat
  // A re-probe measured less than the step that prompted it: no more re-probes; the
  // fastest step's rate raises the peak instead.
  bool futile_ = false;
};

// This process's peak resident set in MiB (getrusage).
double PeakRssMb();

// expert_load (tokens per expert over every MoE layer) and imbalance (max/mean) from
// the world-summed [layers, experts] counts; a declared host read.
void SetExpertLoad(const torch::Tensor& global_counts, v1::StepMetrics& m);

// "gradient reduction: dense 3 buckets, 2 started during backward; ..." per group, and
// FSDP's units and prefetch: what the overlap did, logged once.
std::string DescribeGradientReduction(const std::vector<std::unique_ptr<GradientSynchronizer>>& syncs,
                                      const FullyShardedParameters* fsdp, const ParallelContext& ctx);

}  // namespace trainyard::engine
