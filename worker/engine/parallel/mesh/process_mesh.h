// The dp × tp mesh over world = dp·tp ranks (rank = d·tp + t, so a TP group is tp
// consecutive ranks) and every c10d group training needs, carved from the world group:
//   tp group d        = {d·tp + t : t}                 (activations in TP layers)
//   dp group t        = {d·tp + t : d}                 (gradients of dense parameters)
//   ep group g        = {g·ep + i : i}  consecutive    (token all-to-all; expert shards)
//   expert-dp group i = {g·ep + i : g}                 (gradients of expert parameters)
//   fsdp group (r, t)  = {(r·S + s)·tp + t : s}         (S = dp_shard; dense shards)
//   expert fsdp (r, i) = the members of expert-dp group i in replica r, when
//                        ep divides S·tp (S·tp/ep of them; experts shards), else {rank}
// and, with S > 1, the groups that finish a gradient reduction after the reduce-scatter
// over an FSDP group (the members of the class's reduction group that hold the same
// shard, one per replica, and for the router one per TP rank too):
//   dp replicate (s, t)     = {(r·S + s)·tp + t : r}        (dense gradients; dp group t)
//   router replicate s      = {(r·S + s)·tp + t : r, t}     (router gradients; world)
//   expert replicate (i, j) = member j of expert fsdp (r, i), for every replica r
//                             (expert gradients; expert-dp group i)
// A replica r is the S·tp consecutive ranks of DP ranks r·S .. r·S + S − 1 (S = 1: each
// DP rank is a replica and every FSDP group has one rank).
// EP is carved from dp·tp as torchtitan does with expert-TP 1: an EP group covers the
// TP ranks of ep/tp DP ranks (or part of one TP group when ep < tp). Each rank of a TP
// group routes a disjoint 1/tp slice of its DP rank's tokens, so every rank of the
// world owns distinct MoE tokens and no expert work is repeated.
// Not thread-safe; owned by main (outlives the Trainer and the model).
#pragma once

#include <memory>

#include "worker/engine/config/engine_config.h"
#include "worker/engine/parallel/mesh/collective_group.h"
#include "worker/engine/parallel/mesh/parallel_context.h"

namespace trainyard::engine {

class ProcessMesh {
 public:
  // Blocks until every sub-group has formed. Throws std::invalid_argument when the
  // world size is not dp·tp, ep does not divide it, or dp_shard does not divide dp.
  static std::unique_ptr<ProcessMesh> Build(std::unique_ptr<CollectiveGroup> world,
                                            const ParallelismConfig& parallelism);

  CollectiveGroup& world() { return *world_; }
  CollectiveGroup& tp() { return *tp_; }
  CollectiveGroup& dp() { return *dp_; }
  CollectiveGroup& ep() { return *ep_; }
  CollectiveGroup& expert_dp() { return *expert_dp_; }
  CollectiveGroup& fsdp() { return *fsdp_; }
  CollectiveGroup& expert_fsdp() { return *expert_fsdp_; }
  // With dp_shard > 1 (null otherwise); see above.
  CollectiveGroup* dp_replicate() { return dp_replicate_.get(); }
  CollectiveGroup* router_replicate() { return router_replicate_.get(); }
  CollectiveGroup* expert_replicate() { return expert_replicate_.get(); }
  const ParallelContext& context() const { return context_; }

 private:
  ProcessMesh() = default;

  std::unique_ptr<CollectiveGroup> world_, tp_, dp_, ep_, expert_dp_, fsdp_, expert_fsdp_;
  std::unique_ptr<CollectiveGroup> dp_replicate_, router_replicate_, expert_replicate_;
  ParallelContext context_;
};

}  // namespace trainyard::engine
