// The worker's GPU flags turned into what it offers: --gpus (all | none | a list),
// --nvml-library, --nccl-env and --slots as they depend on the GPUs. main.cc calls these
// once at start; each error is the sentence the worker prints before exiting 2.
//
// NVML: "--gpus none" never loads it. When the library is missing (dlopen fails) and
// --gpus is "all" (the default), the worker is a CPU worker and says so; with an
// explicit list that is an error. Every other NVML failure (a missing symbol,
// nvmlInit_v2 failing, a discovery call failing) is an error, since a GPU machine whose
// driver is broken should not quietly run as a CPU worker; "--gpus none" runs it as one.
//
// Pure except SetUpGpus, which opens NVML; thread-compatible.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "trainyard/v1/device.pb.h"
#include "worker/gpu/gpu_inventory.h"
#include "worker/gpu/nvml_library.h"

namespace trainyard {

struct WorkerGpus {
  std::unique_ptr<NvmlLibrary> nvml;  // null on a CPU worker
  GpuInventory inventory;             // what NVML found (empty on a CPU worker)
  std::vector<v1::GpuDevice> offered;  // after --gpus
  std::vector<std::string> notes;      // what to log at start (CPU worker, unusable GPUs)
};

// Opens NVML at `nvml_library` unless `selection` is "none", discovers the GPUs and
// applies `selection`.
absl::StatusOr<WorkerGpus> SetUpGpus(const std::string &selection, const std::string &nvml_library);

// One --nccl-env NAME=VALUE: NAME must match (TORCH_)?NCCL_[A-Z0-9_]+, VALUE at most 4096
// bytes of printable ASCII (it may be empty).
absl::StatusOr<std::pair<std::string, std::string>> ParseNcclEnvSetting(const std::string &setting);

// The worker's slots: with GPUs, `given` or their number, and never more than it; without,
// `given` is required.
absl::StatusOr<int> ResolveSlots(std::optional<int> given, size_t offered_gpus);

}  // namespace trainyard
