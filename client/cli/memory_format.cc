#include "client/cli/memory_format.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/spec/memory_estimate.h"
#include "common/spec_proto.h"

namespace trainyard::cli {
namespace {

// "7.74M", "1.2B", "640".
std::string Count(double n) {
  char out[32];
  if (n >= 1e9) {
    std::snprintf(out, sizeof out, "%.3gB", n / 1e9);
  } else if (n >= 1e6) {
    std::snprintf(out, sizeof out, "%.3gM", n / 1e6);
  } else if (n >= 1e3) {
    std::snprintf(out, sizeof out, "%.3gK", n / 1e3);
  } else {
    std::snprintf(out, sizeof out, "%.0f", n);
  }
  return out;
}

}  // namespace

std::string FormatMemoryEstimate(const spec::JobSpec& spec) {
  const spec::MemoryEstimate e = spec::EstimateRankMemory(spec);
  const spec::MemoryBreakdown& p = e.peak;
  std::string out = "memory:     " + spec::FormatBytes(e.total_bytes()) + " per rank at its peak, " + e.peak_at +
                    " (estimate, docs/memory.md)\n            " + spec::DescribeLayout(spec) + "\n";
  const bool bf16 = spec.training.mixed_precision == "bf16";
  const bool sharded = e.shard_degree > 1;
  if (sharded) {
    out += "            state between steps " + spec::FormatBytes(e.state_bytes) +
           " per rank (weights, gradients, AdamW: 16 B a parameter of its shards; dp_shard=" +
           std::to_string(e.shard_degree) + ", routed experts " +
           (e.expert_shard_degree == 1 ? std::string("not sharded")
                                       : "over " + std::to_string(e.expert_shard_degree) + " ranks") +
           ")\n";
  }
  const double gathered = p.parameters - 4 * e.shard_params;
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"parameters",
       sharded ? "fp32 shards " + spec::FormatBytes(4 * e.shard_params) + " (" + Count(e.shard_params) + " of " +
                     Count(e.rank_params) + " local parameters)" +
                     (gathered > 0 ? " + " + spec::FormatBytes(gathered) + " gathered whole for the step"
                                   : std::string(", nothing gathered between steps"))
               : "fp32 master weights, " + Count(e.rank_params) + " of " + Count(e.total_params) + " parameters"},
      {"gradients", "fp32, of " + spec::FormatBytes(e.all_gradients) +
                        (sharded ? " full and " + spec::FormatBytes(4 * e.shard_params) + " of shards" : "") +
                        " (those that exist at the peak)"},
      {"optimizer", sharded ? "AdamW's m and v of the shards, fp32" : "AdamW's m and v, fp32"},
      {"weight copies", bf16 ? "bf16 copies of the weights kept for backward"
                             : (e.fused_cpu ? "none (the fused CPU kernels read the weights in place)"
                                            : "the concatenated q|k|v weight of each layer")},
      {"activations", std::string("saved for backward and that moment's buffers (") +
                          (e.fused_cpu ? "fused fp32 CPU kernels"
                           : bf16      ? "bf16"
                                       : "composite fp32 ops") +
                          ")"},
      {"communication", "gradient buckets " + spec::FormatBytes(e.bucket_bytes) + ", EP all-to-all rows " +
                            spec::FormatBytes(p.communication - e.bucket_bytes)},
      {"other", std::string("RoPE tables, the batch") +
                    (e.peak_at.find("probe") != std::string::npos ? ", the GEMM peak probe's operands" : "")},
  };
  const double values[] = {p.parameters,  p.gradients,     p.optimizer, p.compute_weights,
                           p.activations, p.communication, p.other};
  for (size_t i = 0; i < rows.size(); ++i) {
    char line[64];
    std::snprintf(line, sizeof line, "  %-14s %9s  ", rows[i].first.c_str(), spec::FormatBytes(values[i]).c_str());
    out += line + rows[i].second + "\n";
  }
  return out;
}

std::string FormatMemoryEstimate(const v1::JobSpec& spec) {
  absl::StatusOr<spec::JobSpec> core = ResolveAndValidateCore(spec);
  if (!core.ok()) return "memory:     no estimate: " + std::string(core.status().message()) + "\n";
  return FormatMemoryEstimate(*core);
}

std::string MemoryEstimateJsonLine(const spec::JobSpec& spec) {
  const spec::MemoryEstimate e = spec::EstimateRankMemory(spec);
  const spec::MemoryBreakdown& p = e.peak;
  const nlohmann::json estimate = {{"total_bytes", e.total_bytes()},
                                   {"peak_at", e.peak_at},
                                   {"layout", spec::DescribeLayout(spec)},
                                   {"total_params", e.total_params},
                                   {"rank_params", e.rank_params},
                                   {"parameters", p.parameters},
                                   {"gradients", p.gradients},
                                   {"all_gradients", e.all_gradients},
                                   {"optimizer", p.optimizer},
                                   {"compute_weights", p.compute_weights},
                                   {"activations", p.activations},
                                   {"communication", p.communication},
                                   {"gradient_buckets", e.bucket_bytes},
                                   {"other", p.other},
                                   {"fused_cpu_kernels", e.fused_cpu},
                                   {"dp_shard", e.shard_degree},
                                   {"expert_shard", e.expert_shard_degree},
                                   {"shard_params", e.shard_params},
                                   {"gathered_parameters", e.gathered_bytes},
                                   {"state_bytes", e.state_bytes}};
  return nlohmann::json{{"memory_estimate", estimate}}.dump();
}

FleetFit FitFleet(const spec::JobSpec& spec, const std::vector<v1::WorkerInfo>& workers) {
  const bool cuda = spec.resources.device == "cuda";
  // The largest place a rank may go (admission_policy.cc's MemoryLimit).
  double limit = 0;
  std::string where;
  for (const v1::WorkerInfo& w : workers) {
    if (!w.connected()) continue;
    if (!cuda) {
      if (static_cast<double>(w.memory_bytes()) > limit) {
        limit = static_cast<double>(w.memory_bytes());
        where = "the largest worker has (" + w.name() + ": " + spec::FormatBytes(limit) + ")";
      }
      continue;
    }
    if (!w.capabilities().cuda()) continue;
    for (const v1::GpuDevice& g : w.gpus()) {
      if (static_cast<double>(g.memory_bytes()) > limit) {
        limit = static_cast<double>(g.memory_bytes());
        where = "the largest GPU of the fleet has (" + w.name() + " GPU " + std::to_string(g.index()) + ", " +
                g.name() + ": " + spec::FormatBytes(limit) + ")";
      }
    }
  }
  FleetFit fit;
  const double need = spec::EstimateRankMemory(spec).total_bytes();
  const std::string head = "fleet:      the full model needs " + spec::FormatBytes(need) + " a rank";
  if (limit <= 0) {
    fit.text = head + "; no connected worker reported its " + (cuda ? "GPUs' memory" : "memory") + ", so not checked\n";
    return fit;
  }
  fit.known = true;
  fit.fits = need <= limit;
  if (fit.fits) {
    fit.text = head + "; " + where + ": it fits\n";
  } else {
    fit.text = head + ", more than " + where + ";\n            " +
               spec::DescribeSuggestion(spec, spec::SuggestLayout(spec, limit)) +
               ": submit would be refused as it is\n";
  }
  return fit;
}

}  // namespace trainyard::cli
