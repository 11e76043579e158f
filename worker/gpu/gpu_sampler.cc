#include "worker/gpu/gpu_sampler.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard {

namespace {

struct CriticalXid {
  int xid;
  const char* description;
};
constexpr CriticalXid kCriticalXids[] = {
    {48, "double-bit ECC error"},       {64, "ECC row remapping failure"},
    {74, "NVLink error"},               {79, "GPU has fallen off the bus"},
    {94, "contained ECC error"},        {95, "uncontained ECC error"},
};

}  // namespace

bool GpuSampler::IsCriticalXid(int xid) { return XidDescription(xid)[0] != '\0'; }

const char* GpuSampler::XidDescription(int xid) {
  for (const CriticalXid& c : kCriticalXids) {
    if (c.xid == xid) return c.description;
  }
  return "";
}

GpuSampler::GpuSampler(const NvmlLibrary* nvml, std::vector<v1::GpuDevice> offered, Options options,
                       Clock* clock)
    : nvml_(nvml), options_(options), clock_(clock) {
  const NvmlFunctions& f = nvml_->fn();
  if (f.EventSetCreate != nullptr && f.EventSetCreate(&events_) != NVML_SUCCESS) events_ = nullptr;
  absl::MutexLock lock(&sample_mu_);
  for (const v1::GpuDevice& d : offered) {
    Gpu gpu;
    gpu.index = d.index();
    const nvmlReturn_t got = f.DeviceGetHandleByIndex(static_cast<unsigned>(d.index()), &gpu.handle);
    if (got != NVML_SUCCESS) {
      gpu.handle = nullptr;
      if (got == NVML_ERROR_GPU_IS_LOST) {
        gpu.unhealthy_reason = absl::StrCat(
            "GPU is lost: ", nvml_->Describe(absl::StrCat("nvmlDeviceGetHandleByIndex_v2(GPU ", d.index(), ")"), got));
      }
    } else if (events_ != nullptr) {
      const nvmlReturn_t reg = f.DeviceRegisterEvents(gpu.handle, nvmlEventTypeXidCriticalError, events_);
      gpu.events_registered = reg == NVML_SUCCESS;
      if (!gpu.events_registered) {
        spdlog::warn("GPU {}: XID events not available ({}); xid_errors reported as -1", d.index(),
                     nvml_->Describe("nvmlDeviceRegisterEvents", reg));
      }
    }
    gpus_.push_back(std::move(gpu));
  }
}

GpuSampler::~GpuSampler() {
  Stop();
  if (events_ != nullptr) nvml_->fn().EventSetFree(events_);
}

void GpuSampler::Start() {
  SampleOnce();
  thread_ = std::thread([this] { Run(); });
}

void GpuSampler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void GpuSampler::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Time next = clock_->Now() + options_.interval;
      clock_->AwaitWithDeadline(&mu_, absl::Condition(&stopping_), next);
      if (stopping_) return;
    }
    SampleOnce();
  }
}

void GpuSampler::DrainEvents() {
  if (events_ == nullptr) return;
  // Each call returns one pending event; NVML_ERROR_TIMEOUT when none is left. The
  // bound keeps a flood from holding the sample forever; the rest wait for the next.
  for (int n = 0; n < 1024; ++n) {
    nvmlEventData_t data{};
    if (nvml_->fn().EventSetWait(events_, &data, 0) != NVML_SUCCESS) return;
    if ((data.eventType & nvmlEventTypeXidCriticalError) == 0) continue;
    const int xid = static_cast<int>(data.eventData);
    for (Gpu& gpu : gpus_) {
      if (gpu.handle == nullptr || gpu.handle != data.device) continue;
      if (!IsCriticalXid(xid)) {
        spdlog::info("GPU {}: XID {} (not critical; the GPU stays healthy)", gpu.index, xid);
        break;
      }
      ++gpu.xid_errors;
      gpu.last_xid = xid;
      spdlog::error("GPU {}: critical XID {} ({})", gpu.index, xid, XidDescription(xid));
      if (gpu.unhealthy_reason.empty()) {
        gpu.unhealthy_reason = absl::StrCat("critical XID ", xid, " (", XidDescription(xid), ")");
      }
      break;
    }
  }
}

void GpuSampler::ReadGpu(Gpu& gpu, v1::GpuSample& s, std::string& lost) {
  const NvmlFunctions& f = nvml_->fn();
  const std::string of = absl::StrCat("(GPU ", gpu.index, ")");
  // The value of a call, or false (the field stays -1); notes a lost GPU.
  auto ok = [&](const char* call, nvmlReturn_t code) {
    if (code == NVML_ERROR_GPU_IS_LOST && lost.empty()) lost = nvml_->Describe(call + of, code);
    return code == NVML_SUCCESS;
  };
  if (gpu.handle == nullptr &&
      !ok("nvmlDeviceGetHandleByIndex_v2", f.DeviceGetHandleByIndex(static_cast<unsigned>(gpu.index), &gpu.handle))) {
    gpu.handle = nullptr;
    return;
  }
  nvmlMemory_t memory{};
  if (ok("nvmlDeviceGetMemoryInfo", f.DeviceGetMemoryInfo(gpu.handle, &memory))) {
    s.set_memory_used_bytes(static_cast<int64_t>(memory.used));
  }
  nvmlUtilization_t util{};
  if (f.DeviceGetUtilizationRates != nullptr &&
      ok("nvmlDeviceGetUtilizationRates", f.DeviceGetUtilizationRates(gpu.handle, &util))) {
    s.set_utilization(util.gpu / 100.0);
  }
  unsigned int milliwatts = 0;
  if (f.DeviceGetPowerUsage != nullptr && ok("nvmlDeviceGetPowerUsage", f.DeviceGetPowerUsage(gpu.handle, &milliwatts))) {
    s.set_power_watts(milliwatts / 1000.0);
  }
  unsigned int celsius = 0;
  if (f.DeviceGetTemperature != nullptr &&
      ok("nvmlDeviceGetTemperature", f.DeviceGetTemperature(gpu.handle, NVML_TEMPERATURE_GPU, &celsius))) {
    s.set_temperature_celsius(celsius);
  }
  if (f.DeviceGetTotalEccErrors != nullptr) {
    unsigned long long count = 0;
    if (ok("nvmlDeviceGetTotalEccErrors",
           f.DeviceGetTotalEccErrors(gpu.handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &count))) {
      s.set_ecc_uncorrected(static_cast<int64_t>(count));
    }
    if (ok("nvmlDeviceGetTotalEccErrors",
           f.DeviceGetTotalEccErrors(gpu.handle, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &count))) {
      s.set_ecc_corrected(static_cast<int64_t>(count));
    }
  }
}

void GpuSampler::SampleOnce() {
  std::vector<v1::GpuSample> samples;
  {
    absl::MutexLock lock(&sample_mu_);
    DrainEvents();
    for (Gpu& gpu : gpus_) {
      v1::GpuSample s;
      s.set_index(gpu.index);
      s.set_utilization(-1);
      s.set_memory_used_bytes(-1);
      s.set_power_watts(-1);
      s.set_temperature_celsius(-1);
      s.set_ecc_uncorrected(-1);
      s.set_ecc_corrected(-1);
      std::string lost;
      ReadGpu(gpu, s, lost);
      if (gpu.unhealthy_reason.empty()) {
        if (!lost.empty()) {
          gpu.unhealthy_reason = "GPU is lost: " + lost;
        } else if (s.ecc_uncorrected() > 0) {
          gpu.unhealthy_reason = absl::StrCat("uncorrectable ECC errors: ", s.ecc_uncorrected());
        }
        if (!gpu.unhealthy_reason.empty()) spdlog::error("GPU {} unhealthy: {}", gpu.index, gpu.unhealthy_reason);
      }
      s.set_xid_errors(gpu.events_registered ? gpu.xid_errors : -1);
      s.set_last_xid(gpu.last_xid);
      s.set_healthy(gpu.unhealthy_reason.empty());
      s.set_unhealthy_reason(gpu.unhealthy_reason);
      samples.push_back(std::move(s));
    }
  }
  absl::MutexLock lock(&mu_);
  latest_ = std::move(samples);
}

std::vector<v1::GpuSample> GpuSampler::Latest() const {
  absl::MutexLock lock(&mu_);
  return latest_;
}

}  // namespace trainyard
