#include "worker/engine/parallel/parameter_sharding.h"

#include <map>
#include <stdexcept>

namespace trainyard::engine {
namespace {

// (dim, parts, index) of the split, or dim -1 when not split.
struct Split {
  int64_t dim = -1;
  int64_t parts = 1;
  int64_t index = 0;
};

Split SplitOf(ShardKind kind, const ParallelContext& c) {
  switch (kind) {
    case ShardKind::kColumn:
      return {0, c.tp, c.tp_rank};
    case ShardKind::kRow:
      return {1, c.tp, c.tp_rank};
    case ShardKind::kExpert:
      return {0, c.ep, c.ep_rank};
    default:
      return {};
  }
}

}  // namespace

ShardKind ShardKindOf(const std::string& name) {
  // The plan, by torchtitan name: a layer's entries below `layers.<i>.`, the model's
  // own at the top. A name missing here is refused rather than left replicated, so a
  // new layer cannot silently train whole on every rank.
  static const std::map<std::string, ShardKind> kLayer = {
      {"attention_norm.weight", ShardKind::kReplicated},
      {"ffn_norm.weight", ShardKind::kReplicated},
      {"attention.wq.weight", ShardKind::kColumn},
      {"attention.wk.weight", ShardKind::kColumn},
      {"attention.wv.weight", ShardKind::kColumn},
      {"attention.wo.weight", ShardKind::kRow},
      // Latent attention: the heads' projections split like wq; the latent path is whole
      // on every TP rank, its gradient a sum over the ranks' heads.
      {"attention.wq_a.weight", ShardKind::kTpPartial},
      {"attention.q_norm.weight", ShardKind::kTpPartial},
      {"attention.wq_b.weight", ShardKind::kColumn},
      {"attention.wkv_a.weight", ShardKind::kTpPartial},
      {"attention.kv_norm.weight", ShardKind::kTpPartial},
      {"attention.wkv_b.weight", ShardKind::kColumn},
      // Qwen3's per-head q/k norms: one weight over head_dim for every head, its gradient
      // a sum over the heads, so over the TP ranks.
      {"attention.k_norm.weight", ShardKind::kTpPartial},
      {"feed_forward.w1.weight", ShardKind::kColumn},
      {"feed_forward.w3.weight", ShardKind::kColumn},
      {"feed_forward.w2.weight", ShardKind::kRow},
      {"moe.router.gate.weight", ShardKind::kTpPartial},
      {"moe.experts.w1", ShardKind::kExpert},
      {"moe.experts.w2", ShardKind::kExpert},
      {"moe.experts.w3", ShardKind::kExpert},
      {"moe.shared_experts.w1.weight", ShardKind::kColumn},
      {"moe.shared_experts.w3.weight", ShardKind::kColumn},
      {"moe.shared_experts.w2.weight", ShardKind::kRow},
      {"moe.expert_bias", ShardKind::kReplicated},
      {"moe.tokens_per_expert", ShardKind::kReplicated},
  };
  static const std::map<std::string, ShardKind> kModel = {
      {"tok_embeddings.weight", ShardKind::kReplicated},
      {"norm.weight", ShardKind::kReplicated},
      {"output.weight", ShardKind::kReplicated},
  };
  const std::string prefix = "layers.";
  if (name.compare(0, prefix.size(), prefix) == 0) {
    size_t i = prefix.size();
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
    if (i > prefix.size() && i < name.size() && name[i] == '.') {
      auto it = kLayer.find(name.substr(i + 1));
      if (it != kLayer.end()) return it->second;
    }
  } else if (auto it = kModel.find(name); it != kModel.end()) {
    return it->second;
  }
  throw std::invalid_argument("parallelism plan: no entry for tensor \"" + name +
                              "\" (worker/engine/parallel/parameter_sharding.cc lists how each of the model's "
                              "parameters and buffers is split over TP and EP; add it there)");
}

std::vector<int64_t> FullShape(ShardKind kind, c10::IntArrayRef local, const ParallelContext& ctx) {
  std::vector<int64_t> shape = local.vec();
  const Split s = SplitOf(kind, ctx);
  if (s.dim >= 0) shape[s.dim] *= s.parts;
  return shape;
}

std::vector<int64_t> ShardOffsets(ShardKind kind, c10::IntArrayRef local, const ParallelContext& ctx) {
  std::vector<int64_t> offsets(local.size(), 0);
  const Split s = SplitOf(kind, ctx);
  if (s.dim >= 0) offsets[s.dim] = s.index * local[s.dim];
  return offsets;
}

torch::Tensor TakeShard(const torch::Tensor& full, ShardKind kind, const ParallelContext& ctx) {
  const Split s = SplitOf(kind, ctx);
  if (s.dim < 0) return full;
  TORCH_CHECK(full.size(s.dim) % s.parts == 0, "cannot split dim ", s.dim, " of size ", full.size(s.dim), " into ",
              s.parts, " shards");
  const int64_t n = full.size(s.dim) / s.parts;
  return full.narrow(s.dim, s.index * n, n);
}

bool OwnsShard(ShardKind kind, const ParallelContext& ctx) {
  switch (kind) {
    case ShardKind::kColumn:
    case ShardKind::kRow:
      return ctx.dp_rank == 0;  // one replica per TP shard
    case ShardKind::kExpert:
      return ctx.rank < ctx.ep;  // the first EP group
    default:
      return ctx.rank == 0;
  }
}

bool OwnsFsdpShard(ShardKind kind, const ParallelContext& ctx) {
  switch (kind) {
    case ShardKind::kColumn:
    case ShardKind::kRow:
    case ShardKind::kExpert:
      return ctx.replica == 0;
    default:
      return ctx.replica == 0 && ctx.tp_rank == 0;
  }
}

}  // namespace trainyard::engine
