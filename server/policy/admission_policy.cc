#include "server/policy/admission_policy.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/text.h"
#include "common/spec/memory_estimate.h"
#include "common/spec/spec_error.h"
#include "common/spec_proto.h"
#include "common/base/status_macros.h"

namespace trainyard {
namespace {

// "3.2 GiB", "4.1e+03 TiB".
std::string Bytes(double b) { return spec::FormatBytes(b); }

// "w1: libtorch 1.13.0, cuda=false, cudagraph=false; w2: ..." (at most 8 named), with
// the capability `cap` after cuda ("" for none) and the GPU count when `gpus`.
std::string Considered(const FleetView& fleet, const std::string& cap, bool gpus) {
  std::string out;
  size_t i = 0;
  for (const auto& w : fleet.workers) {
    if (i == 8) {
      absl::StrAppend(&out, "; and ", fleet.workers.size() - 8, " more");
      break;
    }
    absl::StrAppend(&out, i++ == 0 ? "" : "; ", w.name, ": libtorch ",
                    w.libtorch_version.empty() ? "unknown" : w.libtorch_version, ", cuda=", w.cuda ? "true" : "false");
    if (cap == "cudagraph") absl::StrAppend(&out, ", cudagraph=", w.cudagraph ? "true" : "false");
    if (cap == "bf16") absl::StrAppend(&out, ", bf16=", w.bf16 ? "true" : "false");
    if (gpus) absl::StrAppend(&out, ", ", w.gpus, " GPUs");
  }
  return out;
}

// "none of the 3 connected workers has both", "the one connected worker does not have it".
std::string NoneHasIt(const FleetView& fleet, const char* what) {
  if (fleet.workers.empty()) return "no worker is connected";
  if (fleet.workers.size() == 1) return absl::StrCat("the one connected worker does not have ", what);
  return absl::StrCat("none of the ", fleet.workers.size(), " connected workers has ", what);
}

// resources.device=cuda, compile.backend=cudagraph, training.mixed_precision=bf16
// against the connected workers' engines and GPUs.
absl::Status CheckDevices(const DeviceNeeds& needs, const FleetView& fleet) {
  auto any = [&](auto pred) { return std::any_of(fleet.workers.begin(), fleet.workers.end(), pred); };
  if (needs.cuda && !any([](const FleetWorker& w) { return w.gpus > 0 && w.cuda; })) {
    return absl::FailedPreconditionError(absl::StrCat(
        "resources.device=cuda needs a worker that offers GPUs and whose engine has the cuda capability; ",
        NoneHasIt(fleet, "both"), fleet.workers.empty() ? "" : absl::StrCat(" (", Considered(fleet, "", true), ")")));
  }
  if (needs.cudagraph && !any([](const FleetWorker& w) { return w.cudagraph; })) {
    return absl::FailedPreconditionError(absl::StrCat(
        "compile.backend=cudagraph needs a worker whose engine has the cudagraph capability; ",
        NoneHasIt(fleet, "it"),
        fleet.workers.empty() ? "" : absl::StrCat(" (", Considered(fleet, "cudagraph", false), ")")));
  }
  if (needs.bf16 && !any([](const FleetWorker& w) { return w.bf16; })) {
    return absl::FailedPreconditionError(absl::StrCat(
        "training.mixed_precision=bf16 needs a worker whose engine has the bf16 capability; ",
        NoneHasIt(fleet, "it"), fleet.workers.empty() ? "" : absl::StrCat(" (", Considered(fleet, "bf16", false), ")")));
  }
  return absl::OkStatus();
}

// The memory one rank of `s` may use: the largest GPU of the workers that can run it
// (CUDA jobs), else the largest host memory reported. {0, ""} when none is known.
std::pair<int64_t, std::string> MemoryLimit(const v1::JobSpec& s, const DeviceNeeds& needs, const FleetView& fleet) {
  if (!needs.cuda) {
    return {fleet.largest_memory_bytes, absl::StrCat("the largest worker has (", fleet.largest_memory_worker, ": ",
                                                     Bytes(static_cast<double>(fleet.largest_memory_bytes)), ")")};
  }
  const FleetWorker* best = nullptr;
  for (const auto& w : fleet.workers) {
    const bool eligible = w.gpus > 0 && w.cuda && (!needs.cudagraph || w.cudagraph) && (!needs.bf16 || w.bf16);
    if (eligible && w.largest_gpu_memory_bytes > 0 &&
        (best == nullptr || w.largest_gpu_memory_bytes > best->largest_gpu_memory_bytes)) {
      best = &w;
    }
  }
  if (best == nullptr) return {0, ""};
  return {best->largest_gpu_memory_bytes,
          absl::StrCat("the largest GPU of the eligible workers has (", best->name, " GPU ", best->largest_gpu_index,
                       ", ", best->largest_gpu_name, ": ", Bytes(static_cast<double>(best->largest_gpu_memory_bytes)),
                       ")")};
}

absl::Status CheckFleet(const v1::JobSpec& s, const DeviceNeeds& needs, const FleetView& fleet) {
  const int64_t world = static_cast<int64_t>(s.parallelism().dp()) * s.parallelism().tp();
  if (world > fleet.connected_slots) {
    // Only a degree above 1 can be lowered: "lower parallelism.tp=1" is no advice.
    std::vector<std::string> lower;
    if (s.parallelism().dp() > 1) lower.push_back(absl::StrCat("parallelism.dp=", s.parallelism().dp()));
    if (s.parallelism().tp() > 1) lower.push_back(absl::StrCat("parallelism.tp=", s.parallelism().tp()));
    const std::string more = fleet.connected_slots == 0 ? "connect a worker" : "connect more workers";
    return absl::InvalidArgumentError(absl::StrCat(
        "world size dp·tp=", world, " exceeds the ", Counted(fleet.connected_slots, "slot"),
        " of all connected workers (",
        lower.empty() ? more : absl::StrCat("lower ", absl::StrJoin(lower, " or "), ", or ", more), ")"));
  }
  TY_RETURN_IF_ERROR(CheckDevices(needs, fleet));
  if (const auto [limit, where] = MemoryLimit(s, needs, fleet); limit > 0) {
    auto core = ResolveAndValidateCore(s);
    if (core.ok()) {
      const spec::MemoryEstimate e = spec::EstimateRankMemory(*core);
      if (e.total_bytes() > static_cast<double>(limit)) {
        // The same world size in another layout (docs/memory.md has the order).
        const spec::LayoutSuggestion fit = spec::SuggestLayout(*core, static_cast<double>(limit));
        return absl::InvalidArgumentError(absl::StrCat(
            "model: one rank needs an estimated ", Bytes(e.total_bytes()), " at ", spec::DescribeLayout(*core), " (",
            spec::DescribeBreakdown(e), "), more than ", where, "; ", spec::DescribeSuggestion(*core, fit)));
      }
    }
  }
  if (!fleet.idle_workers.empty()) {
    // A CUDA rank fits only a GPU with its estimated memory (the scheduler's rule).
    int64_t rank_bytes = 0;
    if (needs.cuda) {
      if (auto core = ResolveAndValidateCore(s); core.ok()) {
        rank_bytes = static_cast<int64_t>(spec::EstimateRankMemory(*core).total_bytes());
      }
    }
    const GangDecision idle = GangScheduler::Place("admission", s, fleet.idle_workers, rank_bytes);
    if (!idle.placed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parallelism.tp=", s.parallelism().tp(), ", parallelism.dp=", s.parallelism().dp(),
          ": this job cannot be placed even with every connected worker idle (",
          idle.pending_reason, "), so it would wait forever"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::JobSpec> AdmissionPolicy::Admit(const v1::JobSpec& submitted,
                                                   const FleetView& fleet) {
  TY_ASSIGN_OR_RETURN(v1::JobSpec normalised, ResolveAndValidateProto(submitted));
  const DeviceNeeds needs = NeedsOf(normalised);
  TY_RETURN_IF_ERROR(CheckFleet(normalised, needs, fleet));
  return normalised;
}

}  // namespace trainyard
