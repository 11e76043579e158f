// A fake NVML for tests: a shared library named libnvidia-ml.so.1 exporting the C ABI of
// worker/gpu/nvml_api.h, driven by the file named by env FAKE_NVML_CONFIG. The file is
// read again on every call, so a test changes the machine mid-run by rewriting it.
// Lines (blank lines and '#' comments ignored):
//   count N                 GPUs (default 0)
//   name TEXT               every GPU's name (default "NVIDIA H200")
//   memory_mib N            every GPU's total memory (default 143771)
//   driver TEXT             system driver version (default "580.159.04")
//   cuda N                  CUDA driver version as NVML gives it (default 13000)
//   nvlink all | none | unknown | GROUP...   GROUP: "0-3" or "5"; all pairs inside a
//                           group are NVLink peers; unknown: nvmlDeviceGetP2PStatus
//                           fails (NOT_SUPPORTED); none (default): no pair is a peer
//   ecc G N / ecc_corrected G N   volatile uncorrectable / corrected ECC errors of GPU G
//   xid G CODE              GPU G reports XID CODE once (each such line is one event)
//   lost G                  every call about GPU G returns NVML_ERROR_GPU_IS_LOST
//   util G F / power_mw G N / temp G N / mem_used_mib G N   readings of GPU G
//   unsupported power|util|temp|ecc|events   that call returns NVML_ERROR_NOT_SUPPORTED
//   fail init|count|handle|uuid|name|memory|driver   that call fails: init with
//                           NVML_ERROR_DRIVER_NOT_LOADED, the others NVML_ERROR_UNKNOWN
// An unreadable file or an unknown line makes nvmlInit_v2 fail with NVML_ERROR_UNKNOWN
// (the reason on stderr). UUIDs are GPU-00000000-0000-0000-0000-0000000000NN (NN the
// index in decimal, zero-padded).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "worker/gpu/nvml_api.h"

namespace {

constexpr int kMaxGpus = 64;

struct FakeDevice {
  int index;
};
FakeDevice g_devices[kMaxGpus];

struct Config {
  bool ok = true;
  std::string error;
  int count = 0;
  std::string name = "NVIDIA H200";
  unsigned long long memory_mib = 143771;
  std::string driver = "580.159.04";
  int cuda = 13000;
  std::string nvlink = "none";
  std::vector<std::pair<int, int>> nvlink_groups;  // inclusive ranges
  std::map<int, unsigned long long> ecc, ecc_corrected, mem_used_mib;
  std::map<int, unsigned> power_mw, temp;
  std::map<int, double> util;
  std::vector<std::pair<int, int>> xids;  // (gpu, code) in file order
  std::set<int> lost;
  std::set<std::string> unsupported, fail;
};

Config Read() {
  Config c;
  const char* path = std::getenv("FAKE_NVML_CONFIG");
  if (path == nullptr) return c;
  std::ifstream in(path);
  if (!in) {
    c.ok = false;
    c.error = std::string("cannot read FAKE_NVML_CONFIG ") + path;
    return c;
  }
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::istringstream words(line);
    std::string key;
    if (!(words >> key) || key[0] == '#') continue;
    int gpu = -1;
    bool good = true;
    if (key == "count") {
      good = static_cast<bool>(words >> c.count) && c.count >= 0 && c.count <= kMaxGpus;
    } else if (key == "name") {
      std::getline(words >> std::ws, c.name);
    } else if (key == "memory_mib") {
      good = static_cast<bool>(words >> c.memory_mib);
    } else if (key == "driver") {
      good = static_cast<bool>(words >> c.driver);
    } else if (key == "cuda") {
      good = static_cast<bool>(words >> c.cuda);
    } else if (key == "nvlink") {
      std::string group;
      c.nvlink = "groups";
      while (words >> group) {
        if (group == "all" || group == "none" || group == "unknown") {
          c.nvlink = group;
          continue;
        }
        int a = -1, b = -1;
        char dash = 0;
        std::istringstream g(group);
        if (!(g >> a)) good = false;
        b = a;
        if (g >> dash && !(dash == '-' && g >> b)) good = false;
        c.nvlink_groups.emplace_back(a, b);
      }
    } else if (key == "ecc" || key == "ecc_corrected" || key == "mem_used_mib") {
      unsigned long long n = 0;
      good = static_cast<bool>(words >> gpu >> n);
      (key == "ecc" ? c.ecc : key == "ecc_corrected" ? c.ecc_corrected : c.mem_used_mib)[gpu] = n;
    } else if (key == "power_mw" || key == "temp") {
      unsigned n = 0;
      good = static_cast<bool>(words >> gpu >> n);
      (key == "temp" ? c.temp : c.power_mw)[gpu] = n;
    } else if (key == "util") {
      double f = 0;
      good = static_cast<bool>(words >> gpu >> f);
      c.util[gpu] = f;
    } else if (key == "xid") {
      int code = 0;
      good = static_cast<bool>(words >> gpu >> code);
      c.xids.emplace_back(gpu, code);
    } else if (key == "lost") {
      good = static_cast<bool>(words >> gpu);
      c.lost.insert(gpu);
    } else if (key == "unsupported" || key == "fail") {
      std::string what;
      good = static_cast<bool>(words >> what);
      (key == "fail" ? c.fail : c.unsupported).insert(what);
    } else {
      good = false;
    }
    if (!good) {
      c.ok = false;
      c.error = std::string(path) + ":" + std::to_string(number) + ": cannot read '" + line + "'";
      return c;
    }
  }
  return c;
}

std::mutex g_mu;
int g_init_count = 0;
std::set<int> g_registered;           // GPUs registered for XID events
std::map<std::pair<int, int>, int> g_delivered;  // (gpu, code) -> events handed out

// The index of a device handle, or -1.
int IndexOf(nvmlDevice_t device) {
  for (int i = 0; i < kMaxGpus; ++i) {
    if (device == reinterpret_cast<nvmlDevice_t>(&g_devices[i])) return i;
  }
  return -1;
}

// The common checks of a per-device call: initialised, a valid handle, not lost.
nvmlReturn_t DeviceCheck(const Config& c, nvmlDevice_t device, int* index) {
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  *index = IndexOf(device);
  if (*index < 0 || *index >= c.count) return NVML_ERROR_INVALID_ARGUMENT;
  if (c.lost.count(*index)) return NVML_ERROR_GPU_IS_LOST;
  return NVML_SUCCESS;
}

nvmlReturn_t CopyText(const std::string& text, char* out, unsigned int length) {
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (text.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}

bool NvlinkPeers(const Config& c, int a, int b) {
  if (c.nvlink == "all") return true;
  for (auto [lo, hi] : c.nvlink_groups) {
    if (a >= lo && a <= hi && b >= lo && b <= hi) return true;
  }
  return false;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  if (!c.ok) {
    std::fprintf(stderr, "fake_nvml: %s\n", c.error.c_str());
    return NVML_ERROR_UNKNOWN;
  }
  if (c.fail.count("init")) return NVML_ERROR_DRIVER_NOT_LOADED;
  for (int i = 0; i < kMaxGpus; ++i) g_devices[i].index = i;
  ++g_init_count;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (--g_init_count == 0) g_registered.clear(), g_delivered.clear();
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
  }
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (c.fail.count("driver")) return NVML_ERROR_UNKNOWN;
  return CopyText(c.driver, version, length);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (version == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  *version = Read().cuda;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (c.fail.count("count")) return NVML_ERROR_UNKNOWN;
  *count = static_cast<unsigned>(c.count);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index,
                                                                                nvmlDevice_t* device) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (index >= static_cast<unsigned>(c.count) || device == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (c.fail.count("handle")) return NVML_ERROR_UNKNOWN;
  if (c.lost.count(static_cast<int>(index))) return NVML_ERROR_GPU_IS_LOST;
  *device = reinterpret_cast<nvmlDevice_t>(&g_devices[index]);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid,
                                                                    unsigned int length) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  int i = -1;
  if (nvmlReturn_t r = DeviceCheck(c, device, &i); r != NVML_SUCCESS) return r;
  if (c.fail.count("uuid")) return NVML_ERROR_UNKNOWN;
  char text[64];
  std::snprintf(text, sizeof text, "GPU-00000000-0000-0000-0000-%012d", i);
  return CopyText(text, uuid, length);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name,
                                                                    unsigned int length) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  int i = -1;
  if (nvmlReturn_t r = DeviceCheck(c, device, &i); r != NVML_SUCCESS) return r;
  if (c.fail.count("name")) return NVML_ERROR_UNKNOWN;
  return CopyText(c.name, name, length);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  int i = -1;
  if (nvmlReturn_t r = DeviceCheck(c, device, &i); r != NVML_SUCCESS) return r;
  if (c.fail.count("memory")) return NVML_ERROR_UNKNOWN;
  memory->total = c.memory_mib << 20;
  memory->used = c.mem_used_mib.count(i) ? c.mem_used_mib[i] << 20 : 0;
  memory->free = memory->total - memory->used;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                                                nvmlUtilization_t* utilization) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  int i = -1;
  if (nvmlReturn_t r = DeviceCheck(c, device, &i); r != NVML_SUCCESS) return r;
  if (c.unsupported.count("util")) return NVML_ERROR_NOT_SUPPORTED;
  utilization->gpu = static_cast<unsigned>(c.util.count(i) ? c.util[i] * 100 + 0.5 : 0);
  utilization->memory = 0;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* mw) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  int i = -1;
  if (nvmlReturn_t r = DeviceCheck(c, device, &i); r != NVML_SUCCESS) return r;
  if (c.unsupported.count("power")) return NVML_ERROR_NOT_SUPPORTED;
  *mw = c.power_mw.count(i) ? c.power_mw[i] : 0;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                                                           nvmlTemperatureSensors_t sensor,
                                                                           unsigned int* temp) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  int i = -1;
  if (nvmlReturn_t r = DeviceCheck(c, device, &i); r != NVML_SUCCESS) return r;
  if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  if (c.unsupported.count("temp")) return NVML_ERROR_NOT_SUPPORTED;
  *temp = c.temp.count(i) ? c.temp[i] : 0;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                                              nvmlMemoryErrorType_t type,
                                                                              nvmlEccCounterType_t counter,
                                                                              unsigned long long* count) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  int i = -1;
  if (nvmlReturn_t r = DeviceCheck(c, device, &i); r != NVML_SUCCESS) return r;
  if (c.unsupported.count("ecc")) return NVML_ERROR_NOT_SUPPORTED;
  if (counter != NVML_VOLATILE_ECC) return NVML_ERROR_INVALID_ARGUMENT;
  auto& table = type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? c.ecc : c.ecc_corrected;
  *count = table.count(i) ? table[i] : 0;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b,
                                                                         nvmlGpuP2PCapsIndex_t index,
                                                                         nvmlGpuP2PStatus_t* status) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  int i = -1, j = -1;
  if (nvmlReturn_t r = DeviceCheck(c, a, &i); r != NVML_SUCCESS) return r;
  if (nvmlReturn_t r = DeviceCheck(c, b, &j); r != NVML_SUCCESS) return r;
  if (c.nvlink == "unknown") return NVML_ERROR_NOT_SUPPORTED;
  if (index != NVML_P2P_CAPS_INDEX_NVLINK) return NVML_ERROR_INVALID_ARGUMENT;
  *status = NvlinkPeers(c, i, j) ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

// One event set per process is enough for the worker; its handle is a fixed address.
static int g_event_set;

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  *set = reinterpret_cast<nvmlEventSet_t>(&g_event_set);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device,
                                                                           unsigned long long types,
                                                                           nvmlEventSet_t set) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  int i = -1;
  if (nvmlReturn_t r = DeviceCheck(c, device, &i); r != NVML_SUCCESS) return r;
  if (c.unsupported.count("events")) return NVML_ERROR_NOT_SUPPORTED;
  if (set != reinterpret_cast<nvmlEventSet_t>(&g_event_set)) return NVML_ERROR_INVALID_ARGUMENT;
  if (types & nvmlEventTypeXidCriticalError) g_registered.insert(i);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data,
                                                                      unsigned int timeout_ms) {
  std::lock_guard<std::mutex> lock(g_mu);
  Config c = Read();
  if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
  if (set != reinterpret_cast<nvmlEventSet_t>(&g_event_set) || data == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  std::map<std::pair<int, int>, int> seen;
  for (auto [gpu, code] : c.xids) {
    const int nth = ++seen[{gpu, code}];
    if (!g_registered.count(gpu) || nth <= g_delivered[{gpu, code}]) continue;
    ++g_delivered[{gpu, code}];
    data->device = reinterpret_cast<nvmlDevice_t>(&g_devices[gpu]);
    data->eventType = nvmlEventTypeXidCriticalError;
    data->eventData = static_cast<unsigned long long>(code);
    data->gpuInstanceId = 0xFFFFFFFFu;
    data->computeInstanceId = 0xFFFFFFFFu;
    return NVML_SUCCESS;
  }
  return NVML_ERROR_TIMEOUT;  // never waits: tests ask with timeout 0
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (set != reinterpret_cast<nvmlEventSet_t>(&g_event_set)) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_SUCCESS;
}

}  // extern "C"
