#include "worker/engine/model/regions/projection.h"

namespace trainyard::engine::regions {

torch::Tensor Project(const torch::Tensor& x, std::initializer_list<torch::Tensor> ws) { return ops::Linear(x, ws); }

}  // namespace trainyard::engine::regions
