// How each named parameter (torchtitan names) is laid out over the mesh, derived from
// its name alone so the model, the gradient reduction, the grad-norm and the full-state
// import/export all agree:
//   kReplicated  tok_embeddings, norms, output, expert_bias: whole on every rank.
//   kTpPartial   moe.router.gate.weight: whole on every rank, but each TP rank routes a
//                different token slice, so its grad is a partial sum over the TP group;
//                likewise latent attention's wq_a, q_norm, wkv_a and kv_norm, whose
//                gradient each TP rank takes from its own heads.
//   kColumn      wq/wk/wv/w1/w3 (dense and shared experts), wq_b/wkv_b (latent
//                attention): dim 0 split over TP.
//   kRow         wo/w2 (dense and shared experts): dim 1 split over TP.
//   kExpert      moe.experts.w1/w2/w3: dim 0 (experts) split over EP.
// The plan is one table of exact names (layers.<i>.<name> and the model's own); a name
// not in it is refused with std::invalid_argument, never left replicated by default.
// Pure functions of their arguments; thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "worker/engine/parallel/mesh/parallel_context.h"

namespace trainyard::engine {

enum class ShardKind { kReplicated, kTpPartial, kColumn, kRow, kExpert };

// Throws std::invalid_argument for a name the plan does not list.
ShardKind ShardKindOf(const std::string& name);

// The full (unsharded) shape of a tensor whose local shard has `local` sizes.
std::vector<int64_t> FullShape(ShardKind kind, c10::IntArrayRef local, const ParallelContext& ctx);

// Where this rank's shard starts in the full tensor, per dimension (zeros when whole).
std::vector<int64_t> ShardOffsets(ShardKind kind, c10::IntArrayRef local, const ParallelContext& ctx);

// This rank's shard of a full tensor (a view).
torch::Tensor TakeShard(const torch::Tensor& full, ShardKind kind, const ParallelContext& ctx);

// Exactly one rank of the world holds each element of the full tensor "as owner":
// the grad norm and the full-state gather count only owners, so replicas are counted
// once.
bool OwnsShard(ShardKind kind, const ParallelContext& ctx);

// The same for a parameter that FSDP shards on dim 0 over its shard group (fully_sharded.h):
// each member of replica 0 holds distinct rows, so all of them own theirs (and of a
// TP-replicated one, only TP rank 0's).
bool OwnsFsdpShard(ShardKind kind, const ParallelContext& ctx);

}  // namespace trainyard::engine
