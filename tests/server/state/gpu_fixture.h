// What the GPU tests of the controller's state share: a GPU worker's Register and
// heartbeat samples as a worker with N GPUs sends them.
#pragma once

#include <string>
#include <vector>

#include "trainyard/v1/worker_service.pb.h"

namespace trainyard::testing {

// Worker `name` with `gpus` H200s (uuid "GPU-<name>-<i>", 140 GiB), one slot per GPU, a
// CUDA engine, ports 40000-40009. `domains`: GPU i's NVLink domain (topology known).
inline v1::Register GpuReg(const std::string& name, int gpus, const std::vector<int>& domains = {}) {
  v1::Register reg;
  reg.set_name(name);
  reg.set_slots(gpus);
  reg.set_address(name + ".local");
  reg.set_rendezvous_port_min(40000);
  reg.set_rendezvous_port_max(40009);
  reg.set_device("cuda");
  reg.set_memory_bytes(int64_t{512} << 30);
  reg.set_gpu_driver_version("580.159.04");
  reg.set_cuda_driver_version("13.0");
  reg.set_nvlink_topology_known(!domains.empty());
  for (int i = 0; i < gpus; ++i) {
    auto* g = reg.add_gpus();
    g->set_index(i);
    g->set_uuid("GPU-" + name + "-" + std::to_string(i));
    g->set_name("NVIDIA H200");
    g->set_memory_bytes(int64_t{140} << 30);
    if (!domains.empty()) g->set_nvlink_domain(domains[i]);
  }
  auto* caps = reg.mutable_capabilities();
  caps->set_libtorch_version("2.5.1");
  caps->set_cuda(true);
  caps->set_cuda_version("12.4");
  caps->set_nccl(true);
  caps->set_bf16(true);
  return reg;
}

// A healthy reading of GPU `index`: 50% busy, 10 GiB used, 300 W, 60 °C.
inline v1::GpuSample Sample(int index) {
  v1::GpuSample s;
  s.set_index(index);
  s.set_utilization(0.5);
  s.set_memory_used_bytes(int64_t{10} << 30);
  s.set_power_watts(300);
  s.set_temperature_celsius(60);
  s.set_healthy(true);
  return s;
}

inline v1::GpuSample Broken(int index, const std::string& reason, int64_t ecc = 1) {
  v1::GpuSample s = Sample(index);
  s.set_healthy(false);
  s.set_ecc_uncorrected(ecc);
  s.set_unhealthy_reason(reason);
  return s;
}

inline v1::Heartbeat Beat(const std::vector<v1::GpuSample>& samples, int free_slots = 0) {
  v1::Heartbeat hb;
  hb.set_free_slots(free_slots);
  for (const auto& s : samples) *hb.add_gpus() = s;
  return hb;
}

}  // namespace trainyard::testing
