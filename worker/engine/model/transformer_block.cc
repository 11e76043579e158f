#include "worker/engine/model/transformer_block.h"

#include "worker/engine/compile/activation_checkpoint.h"

namespace trainyard::engine {

TransformerBlockImpl::TransformerBlockImpl(const ModelConfig& c, bool use_moe, ParallelContext ctx,
                                           RegionFactory& regions, int layer, bool selective_checkpoint,
                                           bool plant_side_effect, bool block_regions)
    : selective_checkpoint_(selective_checkpoint) {
  TORCH_CHECK(!block_regions || (ctx.tp == 1 && !selective_checkpoint && c.architecture == "trainyard"),
              "compile.regions=model needs parallelism.tp=1, activation_checkpoint.mode none or full and "
              "model.architecture trainyard");
  // Under block regions the modules' own regions are plain functions the block embeds.
  RegionFactory& parts = block_regions ? EagerRegionFactory() : regions;
  attention_norm = register_module("attention_norm", RMSNorm(c.dim, c.norm_eps, parts, layer));
  if (c.mla()) {
    mla = register_module("attention", LatentAttention(c, ctx, parts, layer));
  } else {
    attention = register_module("attention", Attention(c, ctx, parts, layer));
  }
  ffn_norm = register_module("ffn_norm", RMSNorm(c.dim, c.norm_eps, parts, layer));
  if (use_moe) {
    moe = register_module("moe", MoE(c, ctx, regions, layer, plant_side_effect, block_regions));
  } else {
    feed_forward = register_module("feed_forward", FeedForward(c.dim, c.ffn_hidden, ctx, parts, layer));
  }
  if (!block_regions) return;
  const int64_t hd = c.head_dim(), qb = AttentionImpl::kQueryBlock;
  if (use_moe) {
    block_region_ =
        regions.Make(regions::MoeBlockEntryKey(c, qb),
                     regions::MoeBlockEntry(c.norm_eps, c.n_heads, c.n_kv_heads, hd, qb, moe->router_fn(), c), layer);
    const bool shared = !moe->shared_experts.is_empty();
    exit_region_ = regions.Make(regions::MoeBlockExitKey(c), regions::MoeBlockExit(shared), layer);
  } else {
    block_region_ = regions.Make(regions::DenseBlockKey(c, qb),
                                 regions::DenseBlock(c.norm_eps, c.n_heads, c.n_kv_heads, hd, qb), layer);
  }
}

torch::Tensor TransformerBlockImpl::Attend(const torch::Tensor& normed, const RotaryEmbedding& rope) {
  return mla ? mla(normed, rope) : attention(normed, rope);
}

BlockOutput TransformerBlockImpl::forward(const torch::Tensor& x, const RotaryEmbedding& rope) {
  if (block_region_) {
    std::vector<torch::Tensor> in{x};
    const auto& constants = attention->Constants(x.size(1), rope, x.options());
    in.insert(in.end(), constants.begin(), constants.end());
    std::vector<torch::Tensor> p{attention_norm->weight, attention->wq->weight, attention->wk->weight,
                                 attention->wv->weight,  attention->wo->weight, ffn_norm->weight};
    if (!moe) {
      p.insert(p.end(), {feed_forward->w1->weight, feed_forward->w2->weight, feed_forward->w3->weight});
      return {block_region_(in, p)[0], torch::Tensor(), torch::Tensor()};
    }
    in.push_back(moe->expert_bias);
    p.push_back(moe->router->gate->weight);
    // h, normed rows, then the router's rows, gates, token ids, counts (and, with a
    // capacity, the kept rows per expert).
    const auto entry = block_region_(in, p);
    const bool capped = entry.size() > 6;
    auto back = moe->RunExperts(entry[2], capped ? entry[6] : entry[5]);
    std::vector<torch::Tensor> shared;
    if (!moe->shared_experts.is_empty()) {
      shared = {moe->shared_experts->w1->weight, moe->shared_experts->w2->weight, moe->shared_experts->w3->weight};
    }
    return {exit_region_({entry[0], back, entry[3], entry[4], entry[1]}, shared)[0], entry[5],
            capped ? entry[5].sum() - entry[6].sum() : torch::Tensor()};
  }
  auto normed = attention_norm(x);
  torch::Tensor attn;
  if (selective_checkpoint_ && torch::GradMode::is_enabled()) {
    attn = compile::Checkpointed(
        [this, &rope](const std::vector<torch::Tensor>& in) -> std::vector<torch::Tensor> {
          return {Attend(in[0], rope)};
        },
        {normed})[0];
  } else {
    attn = Attend(normed, rope);
  }
  auto h = x + attn;
  if (moe) {
    MoEOutput m = moe(ffn_norm(h));
    return {h + m.out, m.tokens_per_expert, m.dropped};
  }
  return {h + feed_forward(ffn_norm(h)), torch::Tensor(), torch::Tensor()};
}

namespace regions {

using compile::RegionFn;
using compile::RegionKey;
using torch::Tensor;

namespace {

std::vector<RegionKey::Field> AttentionFields(const ModelConfig& c, int64_t query_block) {
  return {{"dim", c.dim},
          {"n_heads", c.n_heads},
          {"n_kv_heads", c.n_kv_heads},
          {"head_dim", c.head_dim()},
          {"query_block", query_block},
          {"eps", c.norm_eps}};
}

}  // namespace

RegionKey DenseBlockKey(const ModelConfig& c, int64_t query_block) {
  auto f = AttentionFields(c, query_block);
  f.emplace_back("ffn_hidden", c.ffn_hidden);
  return RegionKey("dense_block", f);
}

RegionKey MoeBlockEntryKey(const ModelConfig& c, int64_t query_block) {
  auto f = AttentionFields(c, query_block);
  f.insert(f.end(), {{"n_experts", c.n_routed_experts},
                     {"top_k", c.top_k},
                     {"score_func", c.score_func},
                     {"route_norm", c.route_norm},
                     {"route_scale", c.route_scale}});
  if (c.capacity_factor > 0) f.emplace_back("capacity_factor", c.capacity_factor);
  if (c.n_expert_groups > 1) {
    f.insert(f.end(), {{"n_groups", c.n_expert_groups}, {"limited_groups", c.n_limited_groups}});
  }
  return RegionKey("moe_block_entry", f);
}

RegionKey MoeBlockExitKey(const ModelConfig& c) {
  return RegionKey(
      "moe_block_exit",
      {{"dim", c.dim}, {"top_k", c.top_k}, {"shared_hidden", int64_t{c.expert_hidden} * c.n_shared_experts}});
}

namespace {

// The attention half of a block: x → (h = x + attn(norm(x)), norm2(h)). inputs: x, cos,
// sin; params from `p[first]`: attention_norm, wq, wk, wv, wo, ffn_norm.
std::pair<Tensor, Tensor> AttentionHalf(const RegionFn& norm, const RegionFn& attention, const std::vector<Tensor>& in,
                                        size_t n_attention_inputs, const std::vector<Tensor>& p) {
  std::vector<Tensor> attn_in(in.begin(), in.begin() + n_attention_inputs);
  attn_in[0] = norm({in[0]}, {p[0]})[0];
  auto h = in[0] + attention(attn_in, {p[1], p[2], p[3], p[4]})[0];
  return {h, norm({h}, {p[5]})[0]};
}

}  // namespace

RegionFn DenseBlock(double eps, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block) {
  RegionFn norm = RmsNorm(eps), attention = Attention(n_heads, n_kv_heads, head_dim, query_block), ffn = Ffn();
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    auto [h, normed] = AttentionHalf(norm, attention, in, in.size(), p);
    return {h + ffn({normed}, {p[6], p[7], p[8]})[0]};
  };
}

RegionFn MoeBlockEntry(double eps, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block,
                       RegionFn router, const ModelConfig& c) {
  const int64_t top_k = c.top_k, n_experts = c.n_routed_experts;
  const double capacity_factor = c.capacity_factor;
  RegionFn norm = RmsNorm(eps), attention = Attention(n_heads, n_kv_heads, head_dim, query_block);
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    auto [h, normed] = AttentionHalf(norm, attention, in, in.size() - 1, p);
    auto flat = normed.reshape({-1, normed.size(-1)});
    // With a capacity that can drop the router takes the sequences whole ([batch, seq,
    // dim]).
    const bool whole = CapacityCanDrop(normed.size(1), top_k, n_experts, capacity_factor);
    auto routed = router({whole ? normed : flat, in.back()}, {p[6]});
    std::vector<Tensor> out{h, flat, routed[0], routed[1], routed[2], routed[3]};
    if (routed.size() > 4) out.push_back(routed[4]);
    return out;
  };
}

RegionFn MoeBlockExit(bool has_shared) {
  RegionFn combine = Combine(), ffn = Ffn();
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    const Tensor& h = in[0];
    const Tensor& normed = in[4];
    auto out = combine({in[1], in[2], in[3], normed}, {})[0];
    if (has_shared) out = out + ffn({normed}, p)[0];
    return {h + out.view(h.sizes())};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
