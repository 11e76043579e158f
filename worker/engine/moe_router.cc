#include "worker/engine/moe_router.h"

namespace trainyard::engine {

TokenChoiceRouterImpl::TokenChoiceRouterImpl(int64_t dim, int64_t n_experts) {
  gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(dim, n_experts).bias(false)));
}

}  // namespace trainyard::engine
