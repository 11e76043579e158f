// The model's compute as pure region functions `(inputs, params) → outputs` (see
// compile/region_fn.h for the contract), and the hook through which the model's
// modules call them: a RegionFactory turns (key, function, layer) into a callable,
// either the function itself (eager) or a compiled region with guards and a cache.
//
// Region kinds (one key per kind and code-changing config; identical layers share it):
//   rms_norm      x → x·rsqrt(mean(x²)+eps)·w                    all norms but the last
//   attention     x, rope cos/sin, causal masks → partial output  (before the TP reduce)
//   ffn           x → w2(silu(w1 x)·w3 x)                         dense FFN, shared expert
//   router        x, expert_bias → routed rows sorted by expert, their gates and
//                 token ids, tokens per expert                     (MoE, before dispatch)
//   expert_ffn    one routed expert's rows → its output            rows vary every step:
//                 dimension 0 of input 0 is dynamic (not guarded)
//   combine       expert rows, gates, token ids → the [n, dim] routed output
//   loss          h, targets → mean cross-entropy of output(norm(h))
// Between regions (graph breaks, reported once each): the TP all-reduces, the MoE
// dispatch (per-expert counts read on the host to size the splits) and the EP
// all-to-alls.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "worker/engine/compile/compile_context.h"
#include "worker/engine/compile/region_fn.h"
#include "worker/engine/compile/region_key.h"
#include "worker/engine/compile/side_effect_probe.h"
#include "worker/engine/engine_config.h"

namespace trainyard::engine {

using RegionCall = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>& inputs,
                                                            const std::vector<torch::Tensor>& params)>;

// (input index, dimension) pairs a region's guards must not pin.
using DynamicDims = std::vector<std::pair<int, int>>;

// Builds the callable for one call site of a region. The model creates one per layer
// and region kind at construction. Not thread-safe.
class RegionFactory {
 public:
  virtual ~RegionFactory() = default;
  virtual RegionCall Make(const compile::RegionKey& key, compile::RegionFn fn, int layer,
                          DynamicDims dynamic = {}) = 0;
  // A declared break between regions (a collective or a host sync) next to the region
  // `adjacent`, reported once per (region, cause).
  virtual void GraphBreak(const compile::RegionKey& adjacent, const std::string& cause) = 0;
  // True when regions run their functions as plain eager code (no trace, no compile):
  // a caller may then run the same computation through a fused kernel instead.
  virtual bool RunsEager() const = 0;
};

// Calls the functions directly; reports nothing. The default for modules built
// without a compile context (unit tests).
RegionFactory& EagerRegionFactory();

// Call sites become compile::CompiledRegion objects of `ctx` watching `watched` (the
// model's named parameters and buffers; may be filled after the model is built).
std::unique_ptr<RegionFactory> MakeCompiledRegionFactory(compile::CompileContext& ctx,
                                                         std::shared_ptr<const compile::WatchedTensors> watched);

namespace regions {

compile::RegionKey RmsNormKey(int64_t dim, double eps);
compile::RegionFn RmsNorm(double eps);

// Causal grouped-query attention on this TP rank's heads, in blocks of `query_block`
// query positions (each block scores only the keys up to its last position).
// inputs: x [b, t, dim], cos/sin [t, head_dim] (RotaryEmbedding tables), then one
// additive mask per query block (CausalBlockMasks). params: wq, wk, wv, wo weights.
compile::RegionKey AttentionKey(int64_t dim, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                int64_t query_block, int tp);
compile::RegionFn Attention(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block);
// The additive masks for `Attention`: per block of query positions [begin, begin+len),
// [len·rep, begin+len] with 0 where the key is not in the future and -inf where it is.
std::vector<torch::Tensor> CausalBlockMasks(int64_t t, int64_t rep, int64_t query_block,
                                            const torch::TensorOptions& options);

// SwiGLU: params w1 [h, d], w2 [d, h], w3 [h, d].
compile::RegionKey FfnKey(const char* kind, int64_t dim, int64_t hidden, int tp);
compile::RegionFn Ffn();

// inputs: x [n, dim], expert_bias [E]; params: gate weight [E, dim]. outputs: rows
// [n·k, dim] sorted by expert (stable, so token order within an expert is kept),
// gates [n·k, 1] in that order, token ids [n·k] int64, tokens per expert [E] int64.
// `plant_into`, when defined, is written with the counts during forward: the test-only
// planted side effect (compile.test_plant_side_effect), which the compile layer must
// catch.
compile::RegionKey RouterKey(int64_t dim, int64_t n_experts, int64_t top_k, const std::string& score_func,
                             bool route_norm, double route_scale);
compile::RegionFn Router(int64_t top_k, std::string score_func, bool route_norm, double route_scale,
                         torch::Tensor plant_into = {});

// inputs: expert rows [m, dim] (weighted by gates here), gates [m, 1], token ids [m],
// like [n, dim] (shape and dtype of the result). output: [n, dim].
compile::RegionKey CombineKey(int64_t dim, int64_t top_k);
compile::RegionFn Combine();

// regions = "model": one region per stretch of a block between graph breaks (tp = 1).
//   dense_block      x, cos, sin, masks... → x + attn + ffn, the whole block
//                    params: attention_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3
//   moe_block_entry  x, cos, sin, masks..., expert_bias → h (after attention), normed h,
//                    then the router's four outputs
//                    params: attention_norm, wq, wk, wv, wo, ffn_norm, gate
//   moe_block_exit   h, expert rows (back from the experts), gates, token ids, normed h
//                    → h + routed + shared; params: shared w1, w2, w3 (none without one)
// Keys hold the attention config, the norm eps, and the FFN / router config of the block.
compile::RegionKey DenseBlockKey(const ModelConfig& c, int64_t query_block);
compile::RegionKey MoeBlockEntryKey(const ModelConfig& c, int64_t query_block);
compile::RegionKey MoeBlockExitKey(const ModelConfig& c);
compile::RegionFn DenseBlock(double eps, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block);
compile::RegionFn MoeBlockEntry(double eps, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                                int64_t query_block, compile::RegionFn router);
compile::RegionFn MoeBlockExit(bool has_shared);

// inputs: h [b, t, dim], targets [b, t] int64; params: final norm weight, output weight.
compile::RegionKey LossKey(int64_t dim, int64_t vocab, double eps);
compile::RegionFn Loss(double eps);

}  // namespace regions
}  // namespace trainyard::engine
