#include "server/policy/gpu_placement.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/policy/gang_scheduler.h"

namespace trainyard {

DeviceNeeds NeedsOf(const v1::JobSpec& spec, int64_t rank_memory_bytes) {
  DeviceNeeds n;
  n.rank_memory_bytes = rank_memory_bytes;
  n.cuda = spec.resources().device() == "cuda";
  n.cudagraph = spec.compile().backend() == "cudagraph";
  n.bf16 = spec.training().mixed_precision() == "bf16";
  return n;
}

std::string WhatIsMissing(const WorkerSnapshot& w, const DeviceNeeds& needs) {
  std::vector<std::string> missing;
  if (w.cordoned) missing.push_back("cordoned");
  if (needs.cuda && w.gpus.empty()) missing.push_back("no GPUs");
  if (needs.cuda && !w.engine_cuda) missing.push_back("its engine is not built with CUDA");
  if (needs.cudagraph && !w.engine_cudagraph) missing.push_back("its engine lacks cudagraph");
  if (needs.bf16 && !w.engine_bf16) missing.push_back("its engine lacks bf16");
  std::string out;
  for (size_t i = 0; i < missing.size(); ++i) absl::StrAppend(&out, i == 0 ? "" : ", ", missing[i]);
  return out;
}

namespace {
bool BigEnough(const GpuView& g, int64_t min_memory) {
  return min_memory <= 0 || g.memory_bytes <= 0 || g.memory_bytes >= min_memory;
}
}  // namespace

std::vector<GpuView> FreeGpus(const WorkerSnapshot& w, int64_t min_memory) {
  std::vector<GpuView> out;
  for (const auto& g : w.gpus) {
    if (g.healthy && !g.held && BigEnough(g, min_memory)) out.push_back(g);
  }
  std::sort(out.begin(), out.end(), [](const GpuView& a, const GpuView& b) { return a.index < b.index; });
  return out;
}

int RankCapacity(const WorkerSnapshot& w, const DeviceNeeds& needs) {
  if (!WhatIsMissing(w, needs).empty()) return 0;
  const int slots = std::max(0, w.free_slots);
  if (!needs.cuda) return slots;
  return std::min(slots, static_cast<int>(FreeGpus(w, needs.rank_memory_bytes).size()));
}

std::vector<int> PickGpus(std::vector<GpuView>* free, int count, bool topology_known) {
  std::sort(free->begin(), free->end(), [](const GpuView& a, const GpuView& b) { return a.index < b.index; });
  std::vector<size_t> chosen;  // positions in *free
  if (topology_known && count > 1) {
    std::map<int, std::vector<size_t>> by_domain;
    for (size_t i = 0; i < free->size(); ++i) {
      if ((*free)[i].nvlink_domain != 0) by_domain[(*free)[i].nvlink_domain].push_back(i);
    }
    const std::vector<size_t>* best = nullptr;
    for (const auto& [domain, members] : by_domain) {  // ascending domain: ties keep the lowest
      if (static_cast<int>(members.size()) < count) continue;
      if (best == nullptr || members.size() < best->size()) best = &members;
    }
    if (best != nullptr) chosen.assign(best->begin(), best->begin() + count);
  }
  if (chosen.empty()) {
    for (int i = 0; i < count && i < static_cast<int>(free->size()); ++i) chosen.push_back(static_cast<size_t>(i));
  }
  std::vector<int> out;
  for (size_t pos : chosen) out.push_back((*free)[pos].index);
  for (auto it = chosen.rbegin(); it != chosen.rend(); ++it) free->erase(free->begin() + static_cast<long>(*it));
  std::sort(out.begin(), out.end());
  return out;
}

std::string GpuFreeEntry(const WorkerSnapshot& w, int64_t min_memory) {
  const int free = static_cast<int>(FreeGpus(w, min_memory).size());
  int held = 0, unhealthy = 0, small = 0;
  for (const auto& g : w.gpus) {
    if (!g.healthy) {
      ++unhealthy;
    } else if (g.held) {
      ++held;
    } else if (!BigEnough(g, min_memory)) {
      ++small;
    }
  }
  std::string out = absl::StrCat(w.name, "=", free, " (", w.gpus.size(), " GPUs, ", held, " held");
  if (unhealthy > 0) absl::StrAppend(&out, ", ", unhealthy, " unhealthy");
  if (small > 0) {
    absl::StrAppend(&out, ", ", small, " smaller than the ",
                    absl::StrFormat("%.3g GiB", static_cast<double>(min_memory) / (1 << 30)), " a rank needs");
  }
  if (w.free_slots < free) absl::StrAppend(&out, ", ", std::max(0, w.free_slots), " free slots");
  absl::StrAppend(&out, ")");
  return out;
}

}  // namespace trainyard
