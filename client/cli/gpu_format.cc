#include "client/cli/gpu_format.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/proto_time.h"
#include "client/cli/cli_format.h"
#include "client/cli/fleet_format.h"

namespace trainyard::cli {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

bool ShowsGpus(const v1::WorkerInfo& w) { return w.gpus_size() > 0 || w.unhealthy_gpus_size() > 0; }

}  // namespace

std::string FormatGpuMemory(int64_t bytes) {
  if (bytes <= 0) return "";
  if (bytes < kGiB) return FormatBytes(bytes);
  return absl::StrCat(std::llround(static_cast<double>(bytes) / static_cast<double>(kGiB)), " GiB");
}

std::string FormatGpuModels(const v1::WorkerInfo& worker) {
  std::vector<std::pair<std::string, int>> groups;  // "NVIDIA H200 140 GiB" -> count, first-seen order
  std::vector<const v1::GpuDevice*> gpus;
  for (const v1::GpuDevice& g : worker.gpus()) gpus.push_back(&g);
  std::stable_sort(gpus.begin(), gpus.end(), [](auto* a, auto* b) { return a->index() < b->index(); });
  for (const v1::GpuDevice* g : gpus) {
    std::string model = g->name().empty() ? "GPU" : g->name();
    if (const std::string memory = FormatGpuMemory(g->memory_bytes()); !memory.empty()) {
      absl::StrAppend(&model, " ", memory);
    }
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& e) { return e.first == model; });
    if (it == groups.end()) {
      groups.push_back({model, 1});
    } else {
      ++it->second;
    }
  }
  if (groups.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [model, n] : groups) parts.push_back(absl::StrCat(n, "× ", model));
  return absl::StrJoin(parts, ", ");
}

std::string FormatIndexList(std::vector<int32_t> indices) {
  std::sort(indices.begin(), indices.end());
  indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < indices.size();) {
    size_t j = i;
    while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1) ++j;
    if (j - i >= 2) {
      parts.push_back(absl::StrCat(indices[i], "-", indices[j]));
    } else {
      for (size_t k = i; k <= j; ++k) parts.push_back(absl::StrCat(indices[k]));
    }
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

std::string FormatFreeGpus(const v1::WorkerInfo& worker) {
  if (worker.gpus_size() == 0) return "-";
  if (worker.free_gpus_size() == 0) return "0";
  std::set<int32_t> distinct(worker.free_gpus().begin(), worker.free_gpus().end());
  return absl::StrCat(distinct.size(), " (",
                      FormatIndexList({worker.free_gpus().begin(), worker.free_gpus().end()}), ")");
}

std::string FormatUnhealthyGpus(const v1::WorkerInfo& worker) {
  std::map<int32_t, std::string> reasons;  // index -> the newest sample's reason ("" when none)
  for (int32_t index : worker.unhealthy_gpus()) reasons.emplace(index, "");
  for (const v1::GpuSample& s : worker.gpu_samples()) {
    if (s.healthy() && reasons.count(s.index()) == 0) continue;
    if (!s.unhealthy_reason().empty()) {
      reasons[s.index()] = s.unhealthy_reason();
    } else {
      reasons.emplace(s.index(), "");
    }
  }
  if (reasons.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [index, reason] : reasons) {
    parts.push_back(reason.empty() ? absl::StrCat(index) : absl::StrCat(index, ": ", reason));
  }
  return absl::StrJoin(parts, "; ");
}

std::string FormatCapabilities(const v1::WorkerInfo& worker) {
  if (!worker.has_capabilities()) return "-";
  const v1::EngineCapabilities& c = worker.capabilities();
  std::vector<std::string> flags;
  if (c.cuda()) {
    flags.push_back(c.cuda_version().empty() ? "cuda" : absl::StrCat("cuda=", c.cuda_version()));
  } else {
    flags.push_back("cpu");
  }
  if (c.nccl()) flags.push_back("nccl");
  if (c.bf16()) flags.push_back("bf16");
  if (c.cudagraph()) flags.push_back("cudagraph");
  return absl::StrJoin(flags, ",");
}

namespace {

// CONNECTED: "yes", "no", or "UNREACHABLE since 04:50:47Z, lost at 04:51:12Z" while the
// controller waits for the worker to reconnect.
std::string FormatConnected(const v1::WorkerInfo& w) {
  if (!w.unreachable()) return w.connected() ? "yes" : "no";
  auto clock = [](const google::protobuf::Timestamp& t) {
    return absl::FormatTime("%H:%M:%SZ", FromProtoTime(t), absl::UTCTimeZone());
  };
  return absl::StrCat("UNREACHABLE since ", clock(w.unreachable_since()), ", lost at ", clock(w.reconnect_deadline()));
}

}  // namespace

std::string FormatWorkersTable(const std::vector<v1::WorkerInfo>& workers) {
  const bool gpu_columns = std::any_of(workers.begin(), workers.end(), ShowsGpus);
  const bool cordon_column =
      std::any_of(workers.begin(), workers.end(), [](const v1::WorkerInfo& w) { return w.cordoned(); });
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"NAME", "SLOTS", "FREE", "CONNECTED", "ADDRESS", "DEVICE", "CAPABILITIES"});
  if (gpu_columns) rows.back().insert(rows.back().end(), {"GPUS", "FREE-GPUS", "UNHEALTHY"});
  if (cordon_column) rows.back().push_back("CORDONED");
  for (const v1::WorkerInfo& w : workers) {
    rows.push_back({w.name(), absl::StrCat(w.slots()), absl::StrCat(w.free_slots()), FormatConnected(w),
                    w.address().empty() ? "-" : w.address(), w.device().empty() ? "-" : w.device(),
                    FormatCapabilities(w)});
    if (gpu_columns) {
      rows.back().insert(rows.back().end(), {FormatGpuModels(w), FormatFreeGpus(w), FormatUnhealthyGpus(w)});
    }
    // Last: the reason is free text of any length.
    if (cordon_column) rows.back().push_back(FormatCordoned(w));
  }
  return FormatColumns(rows);
}

std::string FormatPlacementGpus(const v1::Placement& placement, std::string_view gpus_label,
                                std::string_view nccl_label) {
  std::string out;
  const std::string indent(gpus_label.size(), ' ');
  const bool any_gpu = std::any_of(placement.ranks().begin(), placement.ranks().end(),
                                   [](const v1::Placement::Rank& r) { return r.has_gpu(); });
  if (any_gpu) {
    bool first = true;
    for (const v1::Placement::Rank& r : placement.ranks()) {
      absl::StrAppend(&out, first ? std::string(gpus_label) : indent, "rank ", r.rank(), ": ", r.worker());
      if (r.has_gpu()) {
        absl::StrAppend(&out, " gpu ", r.gpu());
        if (!r.gpu_uuid().empty()) absl::StrAppend(&out, " ", r.gpu_uuid());
      } else {
        out += " (no GPU)";
      }
      out += "\n";
      first = false;
    }
  }
  const std::string nccl_indent(nccl_label.size(), ' ');
  bool first = true;
  for (const v1::Placement::WorkerEnv& e : placement.worker_env()) {
    absl::StrAppend(&out, first ? std::string(nccl_label) : nccl_indent, e.worker(), ": ",
                    e.nccl_env().empty() ? std::string("none") : absl::StrJoin(e.nccl_env(), " "), "\n");
    first = false;
  }
  return out;
}

}  // namespace trainyard::cli
