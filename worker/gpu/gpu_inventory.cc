#include "worker/gpu/gpu_inventory.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/text.h"

namespace trainyard {

namespace {

constexpr size_t kMaxSelectionBytes = 4096;

// Root of `i` with path halving.
int Find(std::vector<int>& parent, int i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

// Sets nvlink_domain of `gpus` from `same` (the groups of their positions): groups of
// two or more get 1, 2, ... by their first member, the others 0.
void NumberDomains(std::vector<v1::GpuDevice>& gpus, std::vector<int>& parent) {
  std::map<int, int> size;
  for (size_t i = 0; i < gpus.size(); ++i) ++size[Find(parent, static_cast<int>(i))];
  std::map<int, int> number;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const int root = Find(parent, static_cast<int>(i));
    if (size[root] < 2) {
      gpus[i].set_nvlink_domain(0);
      continue;
    }
    auto [it, added] = number.emplace(root, static_cast<int>(number.size()) + 1);
    gpus[i].set_nvlink_domain(it->second);
  }
}

// True when the whole pairwise NVLink table could be read (domains set), else false
// (domains left 0).
bool ReadNvlinkDomains(const NvmlLibrary& nvml, const std::vector<nvmlDevice_t>& handles,
                       std::vector<v1::GpuDevice>& gpus) {
  if (nvml.fn().DeviceGetP2PStatus == nullptr) return false;
  std::vector<int> parent(gpus.size());
  std::iota(parent.begin(), parent.end(), 0);
  for (size_t a = 0; a < gpus.size(); ++a) {
    for (size_t b = a + 1; b < gpus.size(); ++b) {
      nvmlGpuP2PStatus_t status = NVML_P2P_STATUS_UNKNOWN;
      if (nvml.fn().DeviceGetP2PStatus(handles[a], handles[b], NVML_P2P_CAPS_INDEX_NVLINK, &status) !=
          NVML_SUCCESS) {
        return false;
      }
      if (status == NVML_P2P_STATUS_OK) parent[Find(parent, a)] = Find(parent, b);
    }
  }
  NumberDomains(gpus, parent);
  return true;
}

// The text NVML wrote into `buffer`, up to its first NUL.
std::string BufferText(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

}  // namespace

std::string CudaVersionText(int version) {
  if (version <= 0) return "";
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

absl::StatusOr<GpuInventory> DiscoverGpus(const NvmlLibrary& nvml) {
  const NvmlFunctions& f = nvml.fn();
  GpuInventory inv;
  char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (absl::Status s = nvml.Check("nvmlSystemGetDriverVersion", f.SystemGetDriverVersion(driver, sizeof driver));
      !s.ok()) {
    return s;
  }
  inv.driver_version = BufferText(driver, sizeof driver);
  if (f.SystemGetCudaDriverVersion != nullptr) {
    int cuda = 0;
    if (f.SystemGetCudaDriverVersion(&cuda) == NVML_SUCCESS) inv.cuda_driver_version = CudaVersionText(cuda);
  }
  unsigned int count = 0;
  if (absl::Status s = nvml.Check("nvmlDeviceGetCount_v2", f.DeviceGetCount(&count)); !s.ok()) return s;
  std::vector<nvmlDevice_t> handles;
  for (unsigned int i = 0; i < count; ++i) {
    const std::string gpu = absl::StrCat("(GPU ", i, ")");
    nvmlDevice_t handle = nullptr;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    nvmlMemory_t memory{};
    nvmlReturn_t code = f.DeviceGetHandleByIndex(i, &handle);
    std::string call = "nvmlDeviceGetHandleByIndex_v2";
    if (code == NVML_SUCCESS) code = f.DeviceGetUUID(handle, uuid, sizeof uuid), call = "nvmlDeviceGetUUID";
    if (code == NVML_SUCCESS) code = f.DeviceGetName(handle, name, sizeof name), call = "nvmlDeviceGetName";
    if (code == NVML_SUCCESS) code = f.DeviceGetMemoryInfo(handle, &memory), call = "nvmlDeviceGetMemoryInfo";
    if (code == NVML_ERROR_GPU_IS_LOST) {
      inv.unusable.emplace_back(static_cast<int>(i), nvml.Describe(call + gpu, code));
      continue;
    }
    if (absl::Status s = nvml.Check(call + gpu, code); !s.ok()) return s;
    v1::GpuDevice d;
    d.set_index(static_cast<int>(i));
    d.set_uuid(BufferText(uuid, sizeof uuid));
    d.set_name(BufferText(name, sizeof name));
    d.set_memory_bytes(static_cast<int64_t>(memory.total));
    if (d.uuid().empty()) {
      return absl::InternalError(absl::StrCat("nvmlDeviceGetUUID", gpu, " returned an empty UUID"));
    }
    inv.gpus.push_back(std::move(d));
    handles.push_back(handle);
  }
  inv.nvlink_topology_known = ReadNvlinkDomains(nvml, handles, inv.gpus);
  return inv;
}

absl::StatusOr<std::vector<v1::GpuDevice>> ParseGpuSelection(const std::string& text,
                                                             const GpuInventory& inventory) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--gpus ", Quoted(text), ": ", why));
  };
  if (text.size() > kMaxSelectionBytes) return bad(absl::StrCat("longer than ", kMaxSelectionBytes, " bytes"));
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) return bad("contains a control or non-ASCII character");
  }
  std::vector<v1::GpuDevice> offered;
  const absl::string_view whole = absl::StripAsciiWhitespace(text);
  if (whole == "none") return offered;
  if (whole == "all") return inventory.gpus;  // domains as discovered
  if (whole.empty()) return bad("expected all, none, or a comma list of GPU indices or UUIDs");
  std::map<int, const v1::GpuDevice*> by_index;
  std::map<std::string, const v1::GpuDevice*> by_uuid;
  for (const auto& g : inventory.gpus) by_index[g.index()] = &g, by_uuid[g.uuid()] = &g;
  std::set<int> unusable;
  for (const auto& [index, why] : inventory.unusable) unusable.insert(index);
  std::set<int> chosen;
  bool indices = false, uuids = false;
  for (absl::string_view raw : absl::StrSplit(whole, ',')) {
    const std::string item(absl::StripAsciiWhitespace(raw));
    if (item.empty()) return bad("an empty item (two commas, or a comma at an end)");
    if (item == "all" || item == "none") return bad(absl::StrCat("'", item, "' must be given alone"));
    const v1::GpuDevice* gpu = nullptr;
    if (absl::ascii_isdigit(static_cast<unsigned char>(item[0]))) {
      indices = true;
      int index = -1;
      if (item.size() > 6 || !std::all_of(item.begin(), item.end(), [](char c) { return absl::ascii_isdigit(c); }) ||
          !absl::SimpleAtoi(item, &index)) {
        return bad(absl::StrCat("'", Clip(item, 40), "' is not a GPU index"));
      }
      if (unusable.count(index)) return bad(absl::StrCat("GPU ", index, " is not usable (NVML: it is lost)"));
      auto it = by_index.find(index);
      if (it == by_index.end()) {
        return bad(absl::StrCat("no GPU with index ", index, " (this machine has ",
                                inventory.gpus.size() + inventory.unusable.size(), ")"));
      }
      gpu = it->second;
    } else {
      uuids = true;
      if (absl::StartsWith(item, "MIG-")) return bad(absl::StrCat("'", Clip(item, 60), "': MIG devices are not supported"));
      if (!absl::StartsWith(item, "GPU-")) {
        return bad(absl::StrCat("'", Clip(item, 60), "' is neither a GPU index nor a UUID (GPU-...)"));
      }
      auto it = by_uuid.find(item);
      if (it == by_uuid.end()) return bad(absl::StrCat("no GPU with UUID ", Clip(item, 60)));
      gpu = it->second;
    }
    if (indices && uuids) return bad("mixes GPU indices and UUIDs; give one kind");
    if (!chosen.insert(gpu->index()).second) {
      return bad(absl::StrCat("GPU ", gpu->index(), " (", gpu->uuid(), ") is given twice"));
    }
  }
  for (int index : chosen) offered.push_back(*by_index.at(index));
  // Renumber the domains among the offered GPUs.
  std::vector<int> parent(offered.size());
  std::iota(parent.begin(), parent.end(), 0);
  for (size_t a = 0; a < offered.size(); ++a) {
    for (size_t b = a + 1; b < offered.size(); ++b) {
      if (offered[a].nvlink_domain() != 0 && offered[a].nvlink_domain() == offered[b].nvlink_domain()) {
        parent[Find(parent, a)] = Find(parent, b);
      }
    }
  }
  NumberDomains(offered, parent);
  return offered;
}

}  // namespace trainyard
