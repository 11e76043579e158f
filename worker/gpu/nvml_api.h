// Our own declarations of the part of NVIDIA's NVML C ABI the worker uses. There is no
// nvml.h on Debian and the worker must build and run without the driver, so the library
// is opened at run time (nvml_library.h) and these are the only declarations we rely on.
//
// Verified against NVIDIA's nvml.h as vendored by github.com/NVIDIA/go-nvml
// (gen/nvml/nvml.h, commit 2f9e261, NVML_API_VERSION 13):
//   nvmlReturn_t codes (SUCCESS 0 ... GPU_IS_LOST 15 ... UNKNOWN 999), the opaque
//   nvmlDevice_t / nvmlEventSet_t handles, nvmlMemory_t {total, free, used} (v1, 3 x
//   unsigned long long), nvmlUtilization_t {gpu, memory} (2 x unsigned int),
//   nvmlEventData_t {device, eventType, eventData, gpuInstanceId, computeInstanceId},
//   nvmlEventTypeXidCriticalError 0x8, NVML_DEVICE_UUID_V2_BUFFER_SIZE 96,
//   NVML_DEVICE_NAME_V2_BUFFER_SIZE 96, NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80,
//   nvmlGpuP2PCapsIndex_t (NVLINK = 2), nvmlGpuP2PStatus_t (OK = 0),
//   nvmlTemperatureSensors_t (GPU = 0), nvmlMemoryErrorType_t (UNCORRECTED = 1),
//   nvmlEccCounterType_t (VOLATILE = 0), NVML_CUDA_DRIVER_VERSION_MAJOR(v) = v / 1000 and
//   _MINOR(v) = (v % 1000) / 10; and the exported symbol names: nvml.h #defines
//   nvmlInit, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex and nvmlEventSetWait to
//   their _v2 versions, which are what we dlsym.
#pragma once

#include <cstdint>

extern "C" {

typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlUtilization_st {
  unsigned int gpu;     // percent of the last sample period a kernel ran
  unsigned int memory;  // percent of it device memory was read or written
} nvmlUtilization_t;

typedef struct nvmlEventData_st {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID for nvmlEventTypeXidCriticalError (999: unknown)
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlEventData_t;

typedef enum nvmlGpuP2PStatus_enum {
  NVML_P2P_STATUS_OK = 0,
  NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1,
  NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
  NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
  NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
  NVML_P2P_STATUS_NOT_SUPPORTED = 5,
  NVML_P2P_STATUS_UNKNOWN = 6
} nvmlGpuP2PStatus_t;

typedef enum nvmlGpuP2PCapsIndex_enum {
  NVML_P2P_CAPS_INDEX_READ = 0,
  NVML_P2P_CAPS_INDEX_WRITE = 1,
  NVML_P2P_CAPS_INDEX_NVLINK = 2,
  NVML_P2P_CAPS_INDEX_ATOMICS = 3,
  NVML_P2P_CAPS_INDEX_PCI = 4,
  NVML_P2P_CAPS_INDEX_UNKNOWN = 5
} nvmlGpuP2PCapsIndex_t;

typedef enum nvmlTemperatureSensors_enum { NVML_TEMPERATURE_GPU = 0 } nvmlTemperatureSensors_t;

typedef enum nvmlMemoryErrorType_enum {
  NVML_MEMORY_ERROR_TYPE_CORRECTED = 0,
  NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
} nvmlMemoryErrorType_t;

typedef enum nvmlEccCounterType_enum {
  NVML_VOLATILE_ECC = 0,   // reset each time the driver loads
  NVML_AGGREGATE_ECC = 1   // the device's lifetime
} nvmlEccCounterType_t;

#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define nvmlEventTypeXidCriticalError 0x0000000000000008LL

// The function types, named after the symbols they are looked up by.
typedef nvmlReturn_t (*nvmlInit_v2_fn)(void);
typedef nvmlReturn_t (*nvmlShutdown_fn)(void);
typedef const char* (*nvmlErrorString_fn)(nvmlReturn_t result);
typedef nvmlReturn_t (*nvmlSystemGetDriverVersion_fn)(char* version, unsigned int length);
typedef nvmlReturn_t (*nvmlSystemGetCudaDriverVersion_fn)(int* cuda_driver_version);
typedef nvmlReturn_t (*nvmlDeviceGetCount_v2_fn)(unsigned int* count);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2_fn)(unsigned int index, nvmlDevice_t* device);
typedef nvmlReturn_t (*nvmlDeviceGetUUID_fn)(nvmlDevice_t device, char* uuid, unsigned int length);
typedef nvmlReturn_t (*nvmlDeviceGetName_fn)(nvmlDevice_t device, char* name, unsigned int length);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_fn)(nvmlDevice_t device, nvmlMemory_t* memory);
typedef nvmlReturn_t (*nvmlDeviceGetUtilizationRates_fn)(nvmlDevice_t device, nvmlUtilization_t* utilization);
typedef nvmlReturn_t (*nvmlDeviceGetPowerUsage_fn)(nvmlDevice_t device, unsigned int* milliwatts);
typedef nvmlReturn_t (*nvmlDeviceGetTemperature_fn)(nvmlDevice_t device, nvmlTemperatureSensors_t sensor,
                                                    unsigned int* celsius);
typedef nvmlReturn_t (*nvmlDeviceGetTotalEccErrors_fn)(nvmlDevice_t device, nvmlMemoryErrorType_t error_type,
                                                       nvmlEccCounterType_t counter_type,
                                                       unsigned long long* count);
typedef nvmlReturn_t (*nvmlDeviceGetP2PStatus_fn)(nvmlDevice_t device1, nvmlDevice_t device2,
                                                  nvmlGpuP2PCapsIndex_t index, nvmlGpuP2PStatus_t* status);
typedef nvmlReturn_t (*nvmlEventSetCreate_fn)(nvmlEventSet_t* set);
typedef nvmlReturn_t (*nvmlDeviceRegisterEvents_fn)(nvmlDevice_t device, unsigned long long event_types,
                                                    nvmlEventSet_t set);
typedef nvmlReturn_t (*nvmlEventSetWait_v2_fn)(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeout_ms);
typedef nvmlReturn_t (*nvmlEventSetFree_fn)(nvmlEventSet_t set);

}  // extern "C"
