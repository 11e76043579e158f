// SwiGLU feed-forward: w2(silu(w1 x) ⊙ w3 x), no biases. Used for the dense layers and
// as the MoE shared expert. With tensor parallelism w1/w3 are column-parallel and w2
// row-parallel (hidden/tp columns per rank). Not thread-safe (a torch module).
#pragma once

#include <torch/torch.h>

#include "worker/engine/compile/region/region_fn.h"
#include "worker/engine/compile/region/region_key.h"
#include "worker/engine/model/regions/region_factory.h"
#include "worker/engine/parallel/mesh/parallel_context.h"

namespace trainyard::engine {

class FeedForwardImpl : public torch::nn::Module {
 public:
  // `kind` is the region kind in compile events ("ffn", "shared_expert").
  FeedForwardImpl(int64_t dim, int64_t hidden, ParallelContext ctx = {},
                  RegionFactory& regions = EagerRegionFactory(), int layer = -1, const char* kind = "ffn");

  // Replicated x in, replicated (TP-reduced) result out.
  torch::Tensor forward(const torch::Tensor& x);

  // This rank's partial sum, for a caller (the MoE) that does the TP copy/reduce
  // itself around more than one branch.
  torch::Tensor Partial(const torch::Tensor& x);

  torch::nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};

 private:
  ParallelContext ctx_;
  RegionCall region_;
};
TORCH_MODULE(FeedForward);

namespace regions {

// The SwiGLU region (kinds ffn, shared_expert, expert_ffn): inputs x; params w1 [h, d],
// w2 [d, h], w3 [h, d].
compile::RegionKey FfnKey(const char* kind, int64_t dim, int64_t hidden, int tp);
compile::RegionFn Ffn();

}  // namespace regions

}  // namespace trainyard::engine
