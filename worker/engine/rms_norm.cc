#include "worker/engine/rms_norm.h"

namespace trainyard::engine {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, RegionFactory& regions, int layer)
    : eps_(eps), region_(regions.Make(regions::RmsNormKey(dim, eps), regions::RmsNorm(eps), layer)) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return region_({x}, {weight})[0]; }

}  // namespace trainyard::engine
