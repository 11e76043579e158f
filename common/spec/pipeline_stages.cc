#include "common/spec/pipeline_stages.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "common/spec/memory_estimate.h"

namespace trainyard::spec {

PipelineCosts PipelineUnitCosts(const JobSpec& spec) {
  const ModelSpec& m = spec.model;
  const ParameterCounts params = CountParameters(m);
  const FlopCounts flops = CountFlops(m, spec.training.seq_len);
  const double total_params = static_cast<double>(params.total);
  auto cost = [&](double p, double f) {
    return (total_params > 0 ? p / total_params : 0) + (flops.per_token > 0 ? f / flops.per_token : 0);
  };
  PipelineCosts c;
  c.embedding = cost(static_cast<double>(params.embedding), 0);
  c.head = cost(static_cast<double>(params.output + params.final_norm), flops.head);
  const double dense = cost(static_cast<double>(params.dense_layer()), flops.dense_layer);
  const double moe = cost(static_cast<double>(params.moe_layer(m.n_routed_experts)), flops.moe_layer);
  c.layers.reserve(std::max(0, m.n_layers));
  for (int i = 0; i < m.n_layers; ++i) c.layers.push_back(i < m.n_dense_layers ? dense : moe);
  return c;
}

int PipelineMicrobatches(const JobSpec& spec) {
  return spec.parallelism.pp_microbatches > 0 ? spec.parallelism.pp_microbatches : spec.training.batch_size;
}

std::optional<SpecError> CheckPipelineLayers(const JobSpec& spec) {
  const ParallelismSpec& p = spec.parallelism;
  const int n_layers = spec.model.n_layers;
  const std::int64_t stages = std::int64_t{p.pp} * p.virtual_stages();
  const std::string pp = "parallelism.pp=" + std::to_string(p.pp);
  const std::string stages_text = std::to_string(stages) + " pipeline stages (" + pp + " times " +
                                  std::to_string(p.virtual_stages()) + " virtual stage" +
                                  (p.virtual_stages() == 1 ? "" : "s") + " a rank)";
  if (stages > n_layers) {
    return Invalid("parallelism.pp", "requires",
                   pp + " needs model.n_layers >= " + stages_text + ", got " + std::to_string(n_layers) +
                       " (every stage holds at least one layer)");
  }
  if (p.pp_layers_per_stage > 0 && stages * p.pp_layers_per_stage != n_layers) {
    return Invalid("parallelism.pp_layers_per_stage", "requires",
                   "parallelism.pp_layers_per_stage=" + std::to_string(p.pp_layers_per_stage) + " times " +
                       stages_text + " must equal model.n_layers=" + std::to_string(n_layers) +
                       " (or leave pp_layers_per_stage out: the split is balanced)");
  }
  return std::nullopt;
}

namespace {

// Splits of layers [0, n) into `stages` non-empty runs, scored stage by stage:
// score = join(score of the stages before, this stage's cost), with join non-decreasing
// in its first argument, so the best split of a prefix extends to the best split of the
// whole (dynamic programming, O(stages · n²)). A stage costing more than `limit` is not
// allowed. Returns the best score and the first layer of each stage; of equal scores,
// the one whose last cut comes first, then the cut before it, and so on.
struct Split {
  double score = 0;
  std::vector<int> firsts;
};

template <class StageCost, class Join>
Split BestSplit(int n, int stages, const StageCost& stage_cost, const Join& join, double limit) {
  constexpr double kNone = std::numeric_limits<double>::infinity();
  // best[s][j]: the best score of layers [0, j) in stages 0..s; first[s][j]: where stage
  // s starts in it. Stage s ends at j with s + 1 <= j <= n - (stages - 1 - s).
  std::vector<std::vector<double>> best(stages, std::vector<double>(n + 1, kNone));
  std::vector<std::vector<int>> first(stages, std::vector<int>(n + 1, 0));
  for (int j = 1; j <= n - (stages - 1); ++j) {
    const double cost = stage_cost(0, j);
    if (cost <= limit) best[0][j] = join(0.0, cost);
  }
  for (int s = 1; s < stages; ++s) {
    for (int j = s + 1; j <= n - (stages - 1 - s); ++j) {
      for (int i = s; i < j; ++i) {
        const double cost = stage_cost(i, j);
        if (best[s - 1][i] == kNone || cost > limit) continue;
        const double score = join(best[s - 1][i], cost);
        if (score < best[s][j]) {
          best[s][j] = score;
          first[s][j] = i;
        }
      }
    }
  }
  Split out;
  out.score = best[stages - 1][n];
  out.firsts.assign(stages, 0);
  for (int s = stages - 1, j = n; s >= 1; --s) {
    j = first[s][j];
    out.firsts[s] = j;
  }
  return out;
}

}  // namespace

// Of the splits whose costliest stage costs least, the most even one (the least sum of
// squared stage costs), so layers the bottleneck leaves free are spread too.
std::vector<int> BalancedStageFirsts(const PipelineCosts& c, int stages) {
  const int n = static_cast<int>(c.layers.size());
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + c.layers[i];
  auto stage_cost = [&](int first, int last) {
    return prefix[last] - prefix[first] + (first == 0 ? c.embedding : 0) + (last == n ? c.head : 0);
  };
  constexpr double kAny = std::numeric_limits<double>::infinity();
  const double least_worst =
      BestSplit(
          n, stages, stage_cost, [](double before, double cost) { return std::max(before, cost); }, kAny)
          .score;
  // Equal costs summed in another order can differ in the last bit: a stage within
  // kTie of the least worst counts as no worse, so the second pass sees every tie.
  constexpr double kTie = 1e-9;
  return BestSplit(
             n, stages, stage_cost, [](double before, double cost) { return before + cost * cost; },
             least_worst * (1 + kTie))
      .firsts;
}

Result<std::vector<PipelineStage>> SplitPipelineStages(const JobSpec& spec) {
  const ParallelismSpec& p = spec.parallelism;
  if (p.pp < 1) {
    return Invalid("parallelism.pp", "range", "parallelism.pp must be at least 1, got " + std::to_string(p.pp));
  }
  if (p.pp_virtual_stages < 0) {
    return Invalid("parallelism.pp_virtual_stages", "range",
                   "parallelism.pp_virtual_stages must be at least 0, got " + std::to_string(p.pp_virtual_stages));
  }
  if (std::optional<SpecError> e = CheckPipelineLayers(spec)) return *e;
  const int stages = p.pipeline_stages();  // <= n_layers <= INT_MAX: checked above
  const PipelineCosts costs = PipelineUnitCosts(spec);
  const int n = static_cast<int>(costs.layers.size());

  std::vector<int> firsts;  // the first layer of each stage, then n
  if (p.pp_layers_per_stage > 0) {
    for (int s = 0; s < stages; ++s) firsts.push_back(s * p.pp_layers_per_stage);
  } else {
    firsts = BalancedStageFirsts(costs, stages);
  }
  firsts.push_back(n);
  std::vector<PipelineStage> out(stages);
  for (int s = 0; s < stages; ++s) {
    PipelineStage& st = out[s];
    st.index = s;
    st.rank = s % p.pp;
    st.first_layer = firsts[s];
    st.last_layer = firsts[s + 1];
    st.embedding = s == 0;
    st.head = s == stages - 1;
    st.cost = (st.embedding ? costs.embedding : 0) + (st.head ? costs.head : 0);
    for (int i = st.first_layer; i < st.last_layer; ++i) st.cost += costs.layers[i];
  }
  return out;
}

}  // namespace trainyard::spec
