#include "server/policy/admission_policy.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/spec/memory_estimate.h"
#include "common/spec/spec_error.h"
#include "common/spec_proto.h"
#include "common/base/status_macros.h"

namespace trainyard {
namespace {

// "3.2 GiB", "4.1e+03 TiB".
std::string Bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return absl::StrFormat("%.3g %s", b, units[u]);
}

absl::Status CheckFleet(const v1::JobSpec& s, const FleetView& fleet) {
  const int64_t world = static_cast<int64_t>(s.parallelism().dp()) * s.parallelism().tp();
  if (world > fleet.connected_slots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world size dp·tp=", world, " exceeds the ", fleet.connected_slots,
        " slots of all connected workers (lower parallelism.dp=", s.parallelism().dp(),
        " or parallelism.tp=", s.parallelism().tp(), ", or connect more workers)"));
  }
  if (!fleet.idle_workers.empty()) {
    const GangDecision idle = GangScheduler::Place("admission", s, fleet.idle_workers);
    if (!idle.placed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parallelism.tp=", s.parallelism().tp(), ", parallelism.dp=", s.parallelism().dp(),
          ": this job cannot be placed even with every connected worker idle (",
          idle.pending_reason, "), so it would wait forever"));
    }
  }
  if (fleet.largest_memory_bytes > 0) {
    auto core = ResolveAndValidateCore(s);
    if (core.ok()) {
      const spec::MemoryEstimate e = spec::EstimateRankMemory(*core);
      if (e.total_bytes() > static_cast<double>(fleet.largest_memory_bytes)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model: one rank needs an estimated ", Bytes(e.total_bytes()), " (", Bytes(e.state_bytes),
            " for ", absl::StrFormat("%.3g", e.rank_params),
            " parameters with gradients and AdamW state, ", Bytes(e.activation_bytes),
            " of activations for training.batch_size=", s.training().batch_size(),
            " x training.seq_len=", s.training().seq_len(), "), more than the largest worker has (",
            fleet.largest_memory_worker, ": ", Bytes(static_cast<double>(fleet.largest_memory_bytes)),
            "); shrink the model or the batch, raise parallelism.tp or parallelism.ep, or set "
            "activation_checkpoint.mode"));
      }
    }
  }
  if (s.resources().device() != "cpu") {
    return absl::UnimplementedError(
        absl::StrCat("resources.device=", s.resources().device(),
                     ": the workers of this controller are CPU-only (GPU workers are not built "
                     "yet; trainyard-train runs CUDA on a GPU machine)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::JobSpec> AdmissionPolicy::Admit(const v1::JobSpec& submitted,
                                                   const FleetView& fleet) {
  TY_ASSIGN_OR_RETURN(v1::JobSpec normalised, ResolveAndValidateProto(submitted));
  TY_RETURN_IF_ERROR(CheckFleet(normalised, fleet));
  return normalised;
}

}  // namespace trainyard
