// What the CLI shows of workers and their GPUs (`trainyard workers`) and of a job's
// GPU placement (`trainyard get`, `trainyard explain`). Pure functions over the
// controller's messages (trainyard.v1 WorkerInfo, Placement; device.proto).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainyard/v1/job.pb.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard::cli {

// NAME SLOTS FREE CONNECTED ADDRESS DEVICE CAPABILITIES, and when any worker offers
// GPUs (or has one taken out of service) also GPUS FREE-GPUS UNHEALTHY, e.g.
//   NAME  SLOTS  FREE  CONNECTED  ADDRESS      DEVICE  CAPABILITIES                  GPUS                   FREE-GPUS    UNHEALTHY
//   g1    8      6     yes        10.0.0.7:71  cuda    cuda=12.4,nccl,bf16,cudagraph 8× NVIDIA H200 140 GiB 5 (0-2,4,6)  3: XID 79
//   c1    4      4     yes        10.0.0.5:71  cpu     cpu                           -                      -            -
// "-" where a worker has nothing to show. When any worker is cordoned, a last column
// CORDONED: "yes (REASON)", "yes" without a reason, "-" for the others. Ends with a newline.
std::string FormatWorkersTable(const std::vector<v1::WorkerInfo>& workers);

// The GPU models of a worker, grouped by name and memory in index order:
// "8× NVIDIA H200 140 GiB", "2× NVIDIA A100 80 GiB, 1× NVIDIA T4 15 GiB"; "-" with none.
std::string FormatGpuModels(const v1::WorkerInfo& worker);
// Memory of one GPU: whole GiB, rounded ("140 GiB"); under 1 GiB as FormatBytes;
// "" for 0 (NVML did not say).
std::string FormatGpuMemory(int64_t bytes);
// Sorted, repeats dropped, runs of three or more as ranges: {7,0,1,2,4,6} -> "0-2,4,6,7".
std::string FormatIndexList(std::vector<int32_t> indices);
// "5 (0-2,4,6)", "0" when none is free; "-" for a worker without GPUs.
std::string FormatFreeGpus(const v1::WorkerInfo& worker);
// Each GPU the controller took out of service (unhealthy_gpus) and each sample that
// reports one unhealthy, by index, with the sample's reason: "3: XID 79; 5"; "-" if none.
std::string FormatUnhealthyGpus(const v1::WorkerInfo& worker);
// What the worker's rank binary runs, compactly: "cuda=12.4,nccl,bf16,cudagraph",
// "cpu,bf16"; "-" when the worker sent no capabilities.
std::string FormatCapabilities(const v1::WorkerInfo& worker);

// The GPU part of a placement, under `label` (the first line) and `label`-wide
// indentation (the others), one line per rank and one per worker's NCCL settings:
//   gpus       rank 0: g1 gpu 0 GPU-8f6c...
//              rank 1: g1 gpu 1 GPU-1c2d...
//   nccl env   g1: NCCL_SOCKET_IFNAME=eth0 NCCL_IB_DISABLE=1
// `nccl_label` has the same width as `gpus_label`. No gpus lines when no rank has a
// GPU (a CPU job), no nccl lines when no worker_env is set. Each line ends with a newline.
std::string FormatPlacementGpus(const v1::Placement& placement, std::string_view gpus_label,
                                std::string_view nccl_label);

}  // namespace trainyard::cli
