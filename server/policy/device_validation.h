// The GPU and engine part of a worker's Register, checked before the registry sees it
// (request_validation::Check(Register) calls it): every count has a cap, every string
// a length and a character set, and an error names the field and quotes at most ~100
// bytes of what was sent.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/status.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard::request_validation {

inline constexpr int kMaxGpus = 1024;                 // GPUs one worker may offer
inline constexpr std::size_t kMaxGpuTextBytes = 128;  // uuid, name, versions
inline constexpr int kMaxNcclEnv = 64;                // --nccl-env settings
inline constexpr std::size_t kMaxNcclEnvBytes = 1024; // one NAME=VALUE

// Whether `setting` is NAME=VALUE with NAME matching (TORCH_)?NCCL_[A-Z0-9_]+ and a
// VALUE of printable ASCII (spaces allowed); "" when it is, else why not.
std::string NcclEnvProblem(std::string_view setting);

// Register.gpus: at most kMaxGpus; each index in [0, kMaxGpus) and each uuid once;
// uuid and name non-empty UTF-8 without control characters, at most kMaxGpuTextBytes;
// memory_bytes >= 0, nvlink_domain >= 0. With GPUs, device is "cuda", and a "cuda"
// worker offers GPUs and at most one slot per GPU. The driver and engine version
// strings: at most kMaxGpuTextBytes of printable ASCII. nccl_env: at most kMaxNcclEnv
// settings of at most kMaxNcclEnvBytes, each as NcclEnvProblem says.
absl::Status CheckDevices(const v1::Register& request);

}  // namespace trainyard::request_validation
