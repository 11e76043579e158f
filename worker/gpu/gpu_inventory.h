// What GPUs this machine has (Discover, through NVML) and which of them the worker
// offers (ParseGpuSelection, the --gpus flag).
//
// NVLink domains: for every pair of GPUs, nvmlDeviceGetP2PStatus(a, b,
// NVML_P2P_CAPS_INDEX_NVLINK) == NVML_P2P_STATUS_OK joins them (union-find), so a domain
// is a connected set of NVLink peers; with NVSwitch (HGX boards) every pair is OK and all
// GPUs form one domain. A domain of one GPU is 0 (no NVLink peer); the others are
// numbered 1, 2, ... in the order of their lowest index. When the library lacks
// nvmlDeviceGetP2PStatus or any pair's call fails, the topology is unknown: every domain
// is 0 and nvlink_topology_known is false.
//
// Pure over the NvmlLibrary it is given; thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainyard/v1/device.pb.h"
#include "worker/gpu/nvml_library.h"

namespace trainyard {

struct GpuInventory {
  std::vector<v1::GpuDevice> gpus;  // every usable GPU, by NVML index
  // GPUs NVML enumerates but cannot read (NVML_ERROR_GPU_IS_LOST at discovery): their
  // index and why. Never offered; "all" leaves them out with a warning.
  std::vector<std::pair<int, std::string>> unusable;
  std::string driver_version;       // "580.159.04"
  std::string cuda_driver_version;  // "13.0"; "" when NVML does not say
  bool nvlink_topology_known = false;
};

// Reads every GPU: index, uuid, name, total memory, the driver and CUDA driver
// versions and the NVLink domains. A failing call is an error naming it and the GPU
// ("nvmlDeviceGetUUID(GPU 3): ... (NVML error N)"), except a GPU that is lost, which
// goes to `unusable`.
absl::StatusOr<GpuInventory> DiscoverGpus(const NvmlLibrary& nvml);

// "13.0" for NVML's 13000 (major = v / 1000, minor = v % 1000 / 10).
std::string CudaVersionText(int version);

// The GPUs the worker offers for the --gpus text: "all" (every usable GPU), "none",
// a comma list of NVML indices ("0,2,3") or of UUIDs ("GPU-8f6c...,GPU-..."), in NVML
// index order. INVALID_ARGUMENT naming the item for an empty item, an unknown or
// unusable index or UUID, a duplicate, a mix of indices and UUIDs, a MIG device, a
// control character or more than 4096 bytes. The offered GPUs' nvlink_domain is
// renumbered among them (a domain left with one offered GPU becomes 0).
absl::StatusOr<std::vector<v1::GpuDevice>> ParseGpuSelection(const std::string& text,
                                                             const GpuInventory& inventory);

}  // namespace trainyard
