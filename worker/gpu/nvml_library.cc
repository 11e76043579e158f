#include "worker/gpu/nvml_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace trainyard {

namespace {

std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown error";
}

// dlsym of `name` into `out`; false when the library lacks it.
template <typename Fn>
bool Lookup(void* handle, const char* name, Fn* out) {
  dlerror();
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) return false;
  *out = reinterpret_cast<Fn>(symbol);
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Open(const std::string& path) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("NVML not found (dlopen ", path, ": ", DlError(), "): no GPUs offered"));
  }
  std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary(path, handle));
  NvmlFunctions& f = lib->fn_;
  auto required = [&](const char* name, auto* out) -> absl::Status {
    if (Lookup(handle, name, out)) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("NVML library ", path, " lacks the symbol ", name, " (", DlError(), ")"));
  };
  for (absl::Status s : {required("nvmlInit_v2", &f.Init), required("nvmlShutdown", &f.Shutdown),
                         required("nvmlErrorString", &f.ErrorString),
                         required("nvmlSystemGetDriverVersion", &f.SystemGetDriverVersion),
                         required("nvmlDeviceGetCount_v2", &f.DeviceGetCount),
                         required("nvmlDeviceGetHandleByIndex_v2", &f.DeviceGetHandleByIndex),
                         required("nvmlDeviceGetUUID", &f.DeviceGetUUID),
                         required("nvmlDeviceGetName", &f.DeviceGetName),
                         required("nvmlDeviceGetMemoryInfo", &f.DeviceGetMemoryInfo)}) {
    if (!s.ok()) return s;  // lib's destructor closes the handle (not initialised)
  }
  if (!Lookup(handle, "nvmlSystemGetCudaDriverVersion_v2", &f.SystemGetCudaDriverVersion)) {
    Lookup(handle, "nvmlSystemGetCudaDriverVersion", &f.SystemGetCudaDriverVersion);
  }
  Lookup(handle, "nvmlDeviceGetP2PStatus", &f.DeviceGetP2PStatus);
  Lookup(handle, "nvmlDeviceGetUtilizationRates", &f.DeviceGetUtilizationRates);
  Lookup(handle, "nvmlDeviceGetPowerUsage", &f.DeviceGetPowerUsage);
  Lookup(handle, "nvmlDeviceGetTemperature", &f.DeviceGetTemperature);
  Lookup(handle, "nvmlDeviceGetTotalEccErrors", &f.DeviceGetTotalEccErrors);
  // XID events need all four.
  if (!(Lookup(handle, "nvmlEventSetCreate", &f.EventSetCreate) &
        Lookup(handle, "nvmlDeviceRegisterEvents", &f.DeviceRegisterEvents) &
        Lookup(handle, "nvmlEventSetWait_v2", &f.EventSetWait) &
        Lookup(handle, "nvmlEventSetFree", &f.EventSetFree))) {
    f.EventSetCreate = nullptr;
    f.DeviceRegisterEvents = nullptr;
    f.EventSetWait = nullptr;
    f.EventSetFree = nullptr;
  }
  const nvmlReturn_t init = f.Init();
  if (init != NVML_SUCCESS) {
    return absl::FailedPreconditionError(
        absl::StrCat(lib->Describe("nvmlInit_v2", init), " (library ", path, ")"));
  }
  lib->initialised_ = true;
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (initialised_) fn_.Shutdown();
  dlclose(handle_);
}

std::string NvmlLibrary::Describe(const std::string& call, nvmlReturn_t code) const {
  const char* text = fn_.ErrorString != nullptr ? fn_.ErrorString(code) : nullptr;
  return absl::StrCat(call, ": ", text != nullptr ? text : "unknown error", " (NVML error ",
                      static_cast<int>(code), ")");
}

absl::Status NvmlLibrary::Check(const std::string& call, nvmlReturn_t code) const {
  if (code == NVML_SUCCESS) return absl::OkStatus();
  if (code == NVML_ERROR_GPU_IS_LOST) return absl::UnavailableError(Describe(call, code));
  return absl::InternalError(Describe(call, code));
}

}  // namespace trainyard
