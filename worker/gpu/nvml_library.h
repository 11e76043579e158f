// NVML, opened at run time: dlopen(path, RTLD_NOW | RTLD_LOCAL), dlsym of each symbol of
// nvml_api.h, then nvmlInit_v2. The worker links no NVIDIA library, so it builds and runs
// on a machine without a driver (where it is a CPU worker).
//
// Required symbols (the library is refused without one): nvmlInit_v2, nvmlShutdown,
// nvmlErrorString, nvmlSystemGetDriverVersion, nvmlDeviceGetCount_v2,
// nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUUID, nvmlDeviceGetName,
// nvmlDeviceGetMemoryInfo. Every other pointer in NvmlFunctions may be null (an older or
// partial NVML): the values it would give are then -1 / unknown, never an error.
//
// Thread contract: NVML's own calls are thread-safe; an NvmlLibrary is immutable after
// Open, so its functions may be called from any thread while it lives.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/gpu/nvml_api.h"

namespace trainyard {

struct NvmlFunctions {
  // Required.
  nvmlInit_v2_fn Init = nullptr;
  nvmlShutdown_fn Shutdown = nullptr;
  nvmlErrorString_fn ErrorString = nullptr;
  nvmlSystemGetDriverVersion_fn SystemGetDriverVersion = nullptr;
  nvmlDeviceGetCount_v2_fn DeviceGetCount = nullptr;
  nvmlDeviceGetHandleByIndex_v2_fn DeviceGetHandleByIndex = nullptr;
  nvmlDeviceGetUUID_fn DeviceGetUUID = nullptr;
  nvmlDeviceGetName_fn DeviceGetName = nullptr;
  nvmlDeviceGetMemoryInfo_fn DeviceGetMemoryInfo = nullptr;
  // Optional (null when the library lacks them).
  nvmlSystemGetCudaDriverVersion_fn SystemGetCudaDriverVersion = nullptr;  // _v2, else v1
  nvmlDeviceGetP2PStatus_fn DeviceGetP2PStatus = nullptr;
  nvmlDeviceGetUtilizationRates_fn DeviceGetUtilizationRates = nullptr;
  nvmlDeviceGetPowerUsage_fn DeviceGetPowerUsage = nullptr;
  nvmlDeviceGetTemperature_fn DeviceGetTemperature = nullptr;
  nvmlDeviceGetTotalEccErrors_fn DeviceGetTotalEccErrors = nullptr;
  nvmlEventSetCreate_fn EventSetCreate = nullptr;
  nvmlDeviceRegisterEvents_fn DeviceRegisterEvents = nullptr;
  nvmlEventSetWait_v2_fn EventSetWait = nullptr;
  nvmlEventSetFree_fn EventSetFree = nullptr;
};

class NvmlLibrary {
 public:
  static constexpr const char* kDefaultPath = "libnvidia-ml.so.1";

  // Opens `path` (a file name is searched as dlopen searches) and initialises NVML.
  //   NOT_FOUND "NVML not found (dlopen PATH: ...): no GPUs offered" when dlopen fails
  //     (the worker then runs as a CPU worker);
  //   FAILED_PRECONDITION "NVML library PATH lacks the symbol S (...)" for a missing
  //     required symbol, and "nvmlInit_v2: <nvmlErrorString> (NVML error N)" when
  //     initialisation fails.
  static absl::StatusOr<std::unique_ptr<NvmlLibrary>> Open(const std::string& path);

  // nvmlShutdown, then dlclose.
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const NvmlFunctions& fn() const { return fn_; }
  const std::string& path() const { return path_; }

  // "CALL: <nvmlErrorString(code)> (NVML error CODE)".
  std::string Describe(const std::string& call, nvmlReturn_t code) const;
  // OK for NVML_SUCCESS, else INTERNAL (UNAVAILABLE for GPU_IS_LOST) with Describe's text.
  absl::Status Check(const std::string& call, nvmlReturn_t code) const;

 private:
  NvmlLibrary(std::string path, void* handle) : path_(std::move(path)), handle_(handle) {}

  const std::string path_;
  void* const handle_;
  NvmlFunctions fn_;
  bool initialised_ = false;
};

}  // namespace trainyard
