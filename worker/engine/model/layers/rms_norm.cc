#include "worker/engine/model/layers/rms_norm.h"

#include "worker/engine/kernels/ops.h"
#include "worker/engine/model/regions/projection.h"

namespace trainyard::engine {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, RegionFactory& regions, int layer)
    : eps_(eps), region_(regions.Make(regions::RmsNormKey(dim, eps), regions::RmsNorm(eps), layer)) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return region_({x}, {weight})[0]; }

namespace regions {

using compile::RegionFn;
using compile::RegionKey;
using torch::Tensor;

RegionKey RmsNormKey(int64_t dim, double eps) { return RegionKey("rms_norm", {{"dim", dim}, {"eps", eps}}); }

Tensor Normalize(const Tensor& x, const Tensor& weight, double eps) { return ops::RmsNorm(x, weight, eps); }

RegionFn RmsNorm(double eps) {
  return [eps](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    return {Normalize(in[0], p[0], eps)};
  };
}

}  // namespace regions

}  // namespace trainyard::engine
