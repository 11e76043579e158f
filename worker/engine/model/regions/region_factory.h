// The hook through which the model's modules call their compute: a RegionFactory turns
// (key, function, layer) into a callable, either the function itself (eager) or a
// compiled region with guards and a cache. The functions are pure region functions
// `(inputs, params) → outputs` (compile/region/region_fn.h has the contract), each
// declared with its key in namespace `regions` next to the module that calls it.
//
// Region kinds (one key per kind and code-changing config; identical layers share it):
//   rms_norm      x → x·rsqrt(mean(x²)+eps)·w                    all norms but the last
//   attention     x, rope cos/sin → partial output  (before the TP reduce)
//   ffn           x → w2(silu(w1 x)·w3 x)                         dense FFN, shared expert
//   router        x, expert_bias → routed rows sorted by expert, their gates and
//                 token ids, tokens per expert                     (MoE, before dispatch)
//   expert_ffn    one routed expert's rows → its output            rows vary every step:
//                 dimension 0 of input 0 is dynamic (not guarded)
//   combine       expert rows, gates, token ids → the [n, dim] routed output
//   loss          h, targets → mean cross-entropy of output(norm(h))
// Where they are: rms_norm in model/layers/rms_norm.h, attention in
// model/layers/attention_layer.h, ffn (also the expert_ffn and shared_expert function)
// in model/layers/dense_ffn.h, router in model/moe/moe_router.h, combine in
// model/moe/moe_layer.h, loss in model/transformer_model.h, and the regions = "model"
// block regions in model/transformer_block.h.
// Between regions (graph breaks, reported once each): the TP all-reduces, the MoE
// dispatch (per-expert counts read on the host to size the splits) and the EP
// all-to-alls.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/engine/compile/compile_context.h"
#include "worker/engine/compile/region/region_fn.h"
#include "worker/engine/compile/region/region_key.h"
#include "worker/engine/compile/region/side_effect_probe.h"

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
  virtual RegionCall Make(const compile::RegionKey& key, compile::RegionFn fn, int layer, DynamicDims dynamic = {}) = 0;
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

}  // namespace trainyard::engine
