// The projection every region's GEMMs go through: x·[ws...]ᵀ.
#pragma once

#include <initializer_list>

#include <torch/torch.h>

namespace trainyard::engine::regions {

// x·[ws...]ᵀ: the fused kernel where it applies (no weight concatenation, GEMMs split
// by rows; kernels/cpu/fused_cpu_kernels.h), else one linear over the concatenated
// weights.
torch::Tensor Project(const torch::Tensor& x, std::initializer_list<torch::Tensor> ws);

}  // namespace trainyard::engine::regions
