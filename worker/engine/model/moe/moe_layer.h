// Token-choice MoE: router, routed experts, optional shared expert, and the
// expert_bias buffer used for aux-loss-free balancing. Dropless unless
// model.capacity_factor > 0: then each expert takes at most ExpertCapacity(s, k, E,
// factor) of each sequence's s tokens (moe_router.h), so drops depend on the sequence
// alone, not on how the batch is split over ranks or micro-batches; under TP each rank
// must therefore route whole sequences. Forward writes no module state:
// the per-expert token counts come back as a value and the trainer applies the bias
// update after the optimizer step.
//
// Parallel layout (see docs/parallelism.md): the input is replicated across the TP
// group. TP rank t routes only its disjoint slice [n·t/tp, n·(t+1)/tp) of the n tokens,
// exchanges them with the EP group (ExpertDispatcher), and writes its slice's routed
// output into an otherwise-zero [n, dim] tensor; the TP-sharded shared expert adds its
// partial sum, and one TP all-reduce assembles both. So no TP rank repeats another's
// routing or expert compute, and tokens_per_expert counts only this rank's slice (a
// sum over the world gives the global counts). The router's weight gradient is
// likewise partial per TP rank and must be summed over the TP group.
// Not thread-safe (a torch module).
#pragma once

#include <torch/torch.h>

#include "worker/engine/compile/region/region_fn.h"
#include "worker/engine/compile/region/region_key.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/model/layers/dense_ffn.h"
#include "worker/engine/model/moe/grouped_experts.h"
#include "worker/engine/model/moe/moe_router.h"
#include "worker/engine/model/regions/region_factory.h"
#include "worker/engine/parallel/expert_dispatcher.h"
#include "worker/engine/parallel/mesh/parallel_context.h"

namespace trainyard::engine {

struct MoEOutput {
  torch::Tensor out;                // same shape as the input
  torch::Tensor tokens_per_expert;  // [n_experts] int64, this rank's tokens only, before drops
  torch::Tensor dropped;            // 0-d int64: assignments dropped by the capacity (undefined: dropless)
};

class MoEImpl : public torch::nn::Module {
 public:
  // `plant_side_effect` (test only): the router region also writes its counts into the
  // buffer `tokens_per_expert`, the write the compile layer must reject.
  // `in_block_regions`: the block's regions (regions = "model") run the router, combine
  // and shared expert; only the routed experts are this module's own regions.
  explicit MoEImpl(const ModelConfig& config, ParallelContext ctx = {}, RegionFactory& regions = EagerRegionFactory(),
                   int layer = -1, bool plant_side_effect = false, bool in_block_regions = false);

  // x: [..., dim], replicated across the TP group. With a capacity factor x is
  // [batch, seq, dim] (a 2-D x is one sequence); a capacity that holds a whole sequence
  // (CapacityCanDrop false) takes the dropless path, bit for bit.
  MoEOutput forward(const torch::Tensor& x);

  // The stretch between the router and the combine: dispatch (host sync, EP all-to-all),
  // the local experts, and the reverse all-to-all. rows: the router's sorted rows;
  // counts: the rows per expert to dispatch (rows past their sum, dropped by the
  // capacity, are not). Returns the expert outputs in the rows' order, zero for the
  // rows not dispatched.
  torch::Tensor RunExperts(const torch::Tensor& rows, const torch::Tensor& counts);
  // The router region's function (embedded by regions = "model").
  const compile::RegionFn& router_fn() const { return router_fn_; }

  // expert_bias += coeff·sign(mean(c) − c), then re-centred to mean zero.
  // `counts` are this step's global tokens per expert.
  void UpdateExpertBias(const torch::Tensor& counts, double coeff);

  TokenChoiceRouter router{nullptr};
  GroupedExperts experts{nullptr};      // this EP rank's E/ep experts
  FeedForward shared_experts{nullptr};  // null when n_shared_experts == 0
  torch::Tensor expert_bias;            // buffer [n_experts], replicated
  torch::Tensor tokens_per_expert;      // buffer, only with plant_side_effect

 private:
  ParallelContext ctx_;
  ExpertDispatcher dispatcher_;
  RegionFactory* regions_;         // borrowed: outlives the model
  RegionFactory* expert_factory_;  // regions_, or the eager factory (plain calls)
  compile::RegionKey expert_key_;
  int layer_;
  int64_t top_k_, n_experts_;
  double capacity_factor_;  // 0: dropless
  RegionCall router_region_, combine_region_;
  RegionCall expert_region_;  // made at the first forward (see RunExperts)
  compile::RegionFn router_fn_;
};
TORCH_MODULE(MoE);

namespace regions {

// The combine region. inputs: expert rows [m, dim] (weighted by gates here), gates
// [m, 1], token ids [m], like [n, dim] (shape and dtype of the result). output: [n, dim].
compile::RegionKey CombineKey(int64_t dim, int64_t top_k);
compile::RegionFn Combine();

}  // namespace regions

}  // namespace trainyard::engine
