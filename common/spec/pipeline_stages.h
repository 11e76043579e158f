// How pipeline parallelism splits a model (docs/parallelism.md, "Pipeline parallelism"):
// the contiguous layers of each virtual stage, and which stages hold the token embedding
// and the final norm, output head and loss. Pure arithmetic on the spec, thread-safe.
// The keys are checked by spec::Validate (which uses CheckPipelineLayers below); the
// pipeline runtime that would run the split is not built yet.
#pragma once

#include <optional>
#include <vector>

#include "common/spec/job_spec.h"
#include "common/spec/spec_error.h"

namespace trainyard::spec {

// One virtual stage. Stage i runs on pp rank i mod pp (the looped placement of 1F1B and
// interleaved 1F1B), and activations flow from stage i to stage i + 1.
struct PipelineStage {
  int index = 0;
  int rank = 0;
  int first_layer = 0;  // transformer blocks [first_layer, last_layer)
  int last_layer = 0;
  bool embedding = false;  // tok_embeddings: the first stage
  bool head = false;       // final norm, output head and loss: the last stage
  // Its share of the model's parameters plus its share of the FLOPs per token (0 to 2;
  // the stages' costs sum to 2).
  double cost = 0;
  int layers() const { return last_layer - first_layer; }
};

// What each unit of the model costs the stage that holds it: its share of the parameters
// (memory_estimate.h's CountParameters; a MoE layer counts every routed expert) plus its share of
// the FLOPs per token (CountFlops; a MoE layer counts top_k experts). The embedding has
// no FLOPs (a lookup); the head is the final norm and the output projection.
struct PipelineCosts {
  double embedding = 0;
  std::vector<double> layers;  // model.n_layers of them; the n_dense_layers dense ones first
  double head = 0;
};
PipelineCosts PipelineUnitCosts(const JobSpec& spec);

// The pipeline's microbatches per DP rank and micro-batch: parallelism.pp_microbatches,
// or training.batch_size (one sequence each) when it is 0.
int PipelineMicrobatches(const JobSpec& spec);

// The rules on layers that the split needs (a spec::Validate rule, kInvalid): every
// virtual stage holds at least one layer (model.n_layers >= pp · virtual stages), and a
// pp_layers_per_stage > 0 tiles the model (pp · virtual stages · it = model.n_layers).
std::optional<SpecError> CheckPipelineLayers(const JobSpec& spec);

// The balanced split of `costs` into `stages` (1 <= stages <= its layers) non-empty runs
// of layers, as the first layer of each: the one SplitPipelineStages makes.
std::vector<int> BalancedStageFirsts(const PipelineCosts& costs, int stages);

// The pp · virtual_stages() stages of `spec`, in order. With pp_layers_per_stage > 0,
// that many layers each. Else balanced: the contiguous split whose costliest stage
// (its layers, plus the embedding on the first and the head on the last) costs least;
// of those (to a relative 1e-9, as sums of doubles round), the one with the least sum
// of squared stage costs (the most even), then the one whose last cut comes first.
// Exact, by dynamic programming over the cuts (O(stages · n_layers²)). Errors: CheckPipelineLayers's, pp below 1 or a
// negative pp_virtual_stages.
Result<std::vector<PipelineStage>> SplitPipelineStages(const JobSpec& spec);

}  // namespace trainyard::spec
