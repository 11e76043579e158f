// Where a rank's tensors live, from resources.device: "cpu", or "cuda", where the rank
// with local index r (its index among the ranks of one machine) trains on GPU
// r % device_count. The worker starts each rank with CUDA_VISIBLE_DEVICES=<the uuid of
// its GPU>, so there device_count is 1 and every rank takes device 0, its own GPU;
// trainyard-train leaves every GPU visible and rank i takes GPU i. The model, RoPE tables, batches and every tensor
// handed to a collective live there, and its process groups are NCCL (CollectiveGroup). Whether this process can use
// CUDA depends on the build (a CUDA LibTorch with NCCL headers) and on the machine (a visible GPU); both are checked at
// config time, before any rank starts, so a CPU build refuses "cuda" with the reason instead of failing mid-run.
// Stateless; call from main.
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "worker/engine/config/engine_config.h"

namespace trainyard::engine {

class DevicePlacement {
 public:
  // Throws std::invalid_argument when this process cannot train on
  // resources.device: "config: resources.device=cuda: this engine was built against
  // LibTorch 1.13.1 without CUDA", or on a CUDA build "... no CUDA device is visible
  // (torch::cuda::device_count()=0; ...)".
  static void RequireUsable(const ResourcesConfig& resources);

  // The device of the rank with this local index (RequireUsable first). For CUDA it
  // also makes that GPU the process's current device and turns TF32 off, so fp32
  // matmuls stay fp32 (losses comparable with CPU; the GEMM peak is the fp32 one).
  static c10::Device ForLocalRank(const ResourcesConfig& resources, int local_rank);

  // "cpu" or "cuda:1 (2 visible, TF32 off)": for the start-up log line.
  static std::string Describe(const c10::Device& device);
};

}  // namespace trainyard::engine
