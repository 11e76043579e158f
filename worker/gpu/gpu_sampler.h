// Samples the offered GPUs through NVML every --gpu-sample-interval seconds: utilisation,
// memory used, power (NVML's milliwatts as watts), temperature, volatile ECC counts and
// critical XID events, and decides each GPU's health. The worker sends Latest() with
// every heartbeat; the controller exports it and keeps new ranks off unhealthy GPUs.
//
// Health is sticky for the worker's lifetime (a GPU needs a reset, which restarts the
// worker's NVML view anyway). A GPU becomes unhealthy, with the first reason kept, when
//   - nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE) > 0: "uncorrectable ECC errors: N";
//   - a critical XID arrives on the event set registered at Start
//     (nvmlEventTypeXidCriticalError, drained with a 0 ms nvmlEventSetWait_v2 each
//     sample): "critical XID 79 (GPU has fallen off the bus)". Critical are the XIDs of
//     hardware faults that need a GPU reset or a drain in NVIDIA's Xid catalog (docs.
//     nvidia.com/deploy/xid-errors): 48 double-bit ECC, 64 row-remapping failure, 74
//     NVLink error, 79 fallen off the bus, 94 contained ECC error, 95 uncontained ECC
//     error. Application faults (13, 31, 43, 45, ...) and early signals (63 row remap
//     recorded, 92 high single-bit rate) are not counted;
//   - any call returns NVML_ERROR_GPU_IS_LOST: "GPU is lost: <the call>".
// A value NVML does not report (NOT_SUPPORTED, or the symbol is absent) is -1; so is
// xid_errors when the event set could not be registered for that GPU.
//
// Every wait is on the injected Clock. Thread contract: SampleOnce and Latest are
// thread-safe; Start and Stop are called from one thread. Latest is empty before the
// first sample (Start takes one before it returns).
#pragma once

#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "trainyard/v1/device.pb.h"
#include "worker/gpu/nvml_library.h"

namespace trainyard {

class GpuSampler {
 public:
  struct Options {
    absl::Duration interval = absl::Seconds(5);
  };

  // Whether XID `xid` marks a GPU unhealthy (the list above).
  static bool IsCriticalXid(int xid);
  // A few words for a critical XID ("GPU has fallen off the bus"), "" for others.
  static const char* XidDescription(int xid);

  // `nvml` must outlive the sampler. Registers the XID event set.
  GpuSampler(const NvmlLibrary* nvml, std::vector<v1::GpuDevice> offered, Options options, Clock* clock);
  ~GpuSampler();  // Stop(), then frees the event set
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  // Takes one sample, then starts the sampling thread.
  void Start();
  void Stop();

  // Reads every offered GPU once and updates Latest().
  void SampleOnce();
  // The newest sample of each offered GPU, in the order they were offered.
  std::vector<v1::GpuSample> Latest() const;

 private:
  struct Gpu {
    int index = 0;
    nvmlDevice_t handle = nullptr;
    bool events_registered = false;
    int64_t xid_errors = 0;
    int last_xid = 0;
    std::string unhealthy_reason;  // "" while healthy
  };

  // Reads one GPU into `s`; the first GPU_IS_LOST call's text in `lost`.
  void ReadGpu(Gpu& gpu, v1::GpuSample& s, std::string& lost) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sample_mu_);
  void DrainEvents() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sample_mu_);
  void Run();

  const NvmlLibrary* const nvml_;
  const Options options_;
  Clock* const clock_;
  nvmlEventSet_t events_ = nullptr;

  absl::Mutex sample_mu_;  // one SampleOnce at a time; guards gpus_
  std::vector<Gpu> gpus_ ABSL_GUARDED_BY(sample_mu_);

  mutable absl::Mutex mu_;
  std::vector<v1::GpuSample> latest_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainyard
