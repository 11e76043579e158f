#include "worker/engine/model/regions/projection.h"

#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"

namespace trainyard::engine::regions {

namespace F = torch::nn::functional;

torch::Tensor Project(const torch::Tensor& x, std::initializer_list<torch::Tensor> ws) {
  if (fused::Applies(x)) return fused::Linear(x, ws);
  // Cast once, after the concatenation: the same values as casting each weight.
  return F::linear(x, AsComputeType(ws.size() == 1 ? *ws.begin() : torch::cat(ws, 0), x));
}

}  // namespace trainyard::engine::regions
