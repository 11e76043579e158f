#include "worker/engine/parallel/parameter_sharding.h"

namespace trainyard::engine {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// (dim, parts, index) of the split, or dim -1 when not split.
struct Split {
  int64_t dim = -1;
  int64_t parts = 1;
  int64_t index = 0;
};

Split SplitOf(ShardKind kind, const ParallelContext& c) {
  switch (kind) {
    case ShardKind::kColumn: return {0, c.tp, c.tp_rank};
    case ShardKind::kRow: return {1, c.tp, c.tp_rank};
    case ShardKind::kExpert: return {0, c.ep, c.ep_rank};
    default: return {};
  }
}

}  // namespace

ShardKind ShardKindOf(const std::string& name) {
  if (name.find(".moe.experts.") != std::string::npos) return ShardKind::kExpert;
  if (EndsWith(name, ".router.gate.weight")) return ShardKind::kTpPartial;
  for (const char* s : {".wq.weight", ".wk.weight", ".wv.weight", ".w1.weight", ".w3.weight"}) {
    if (EndsWith(name, s)) return ShardKind::kColumn;
  }
  for (const char* s : {".wo.weight", ".w2.weight"}) {
    if (EndsWith(name, s)) return ShardKind::kRow;
  }
  return ShardKind::kReplicated;
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
  TORCH_CHECK(full.size(s.dim) % s.parts == 0, "cannot split dim ", s.dim, " of size ",
              full.size(s.dim), " into ", s.parts, " shards");
  const int64_t n = full.size(s.dim) / s.parts;
  return full.narrow(s.dim, s.index * n, n);
}

bool OwnsShard(ShardKind kind, const ParallelContext& ctx) {
  switch (kind) {
    case ShardKind::kColumn:
    case ShardKind::kRow: return ctx.dp_rank == 0;  // one replica per TP shard
    case ShardKind::kExpert: return ctx.rank < ctx.ep;  // the first EP group
    default: return ctx.rank == 0;
  }
}

bool OwnsFsdpShard(ShardKind kind, const ParallelContext& ctx) {
  switch (kind) {
    case ShardKind::kColumn:
    case ShardKind::kRow:
    case ShardKind::kExpert: return ctx.replica == 0;
    default: return ctx.replica == 0 && ctx.tp_rank == 0;
  }
}

}  // namespace trainyard::engine
