#include "worker/engine/model/layers/dense_ffn.h"

#include "worker/engine/kernels/ops.h"
#include "worker/engine/model/regions/projection.h"
#include "worker/engine/parallel/parallel_autograd.h"

namespace trainyard::engine {

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t hidden, ParallelContext ctx, RegionFactory& regions, int layer,
                                 const char* kind)
    : ctx_(ctx), region_(regions.Make(regions::FfnKey(kind, dim, hidden, ctx.tp), regions::Ffn(), layer)) {
  if (ctx.tp > 1) {
    regions.GraphBreak(regions::FfnKey(kind, dim, hidden, ctx.tp),
                       "TP all-reduce of the row-parallel w2 output (collective)");
  }
  TORCH_CHECK(hidden % ctx.tp == 0, "FeedForward: tp=", ctx.tp, " must divide hidden=", hidden);
  const int64_t local = hidden / ctx.tp;
  w1 = register_module("w1", torch::nn::Linear(torch::nn::LinearOptions(dim, local).bias(false)));
  w2 = register_module("w2", torch::nn::Linear(torch::nn::LinearOptions(local, dim).bias(false)));
  w3 = register_module("w3", torch::nn::Linear(torch::nn::LinearOptions(dim, local).bias(false)));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  return ReduceFromRegion(Partial(CopyToRegion(x, ctx_.tp_group)), ctx_.tp_group);
}

torch::Tensor FeedForwardImpl::Partial(const torch::Tensor& x) {
  return region_({x}, {w1->weight, w2->weight, w3->weight})[0];
}

namespace regions {

using compile::RegionFn;
using compile::RegionKey;
using torch::Tensor;

RegionKey FfnKey(const char* kind, int64_t dim, int64_t hidden, int tp) {
  return RegionKey(kind, {{"dim", dim}, {"hidden", hidden}, {"tp", tp}});
}

RegionFn Ffn() {
  return [](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    // One GEMM for w1 and w3 (two torchtitan-named parameters), then the activation.
    return {Project(ops::SwiGlu(Project(in[0], {p[0], p[2]})), {p[1]})};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
