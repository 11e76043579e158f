// The projection every region's GEMMs go through: x·[ws...]ᵀ, and the one rule of bf16
// mixed precision (training.mixed_precision = "bf16", torchtitan's default policy):
//   - the model keeps fp32 weights (the master copy the optimizer updates, with fp32
//     gradients and fp32 AdamW state); the model's forward casts the embedding output to
//     the compute dtype, and every region casts each weight it uses to the dtype of its
//     activations (AsComputeType) inside the operator it calls (kernels/ops.h), so its
//     backward hands an fp32 gradient to the fp32 weight;
//   - statistics stay fp32: RMSNorm normalizes in fp32, attention's softmax and the
//     router's scores run in fp32, RoPE rotates in fp32, and the loss takes fp32 logits.
// In an fp32 model every cast is the identity (the same tensor), so the fp32 path runs
// exactly the operations it ran before bf16 existed.
#pragma once

#include <torch/torch.h>

#include <initializer_list>

#include "worker/engine/kernels/ops.h"

namespace trainyard::engine::regions {

using ops::AsComputeType;
using ops::IsReducedPrecision;

// x·[ws...]ᵀ through trainyard::linear (the fused CPU kernel on fp32 CPU: no weight
// concatenation, GEMMs split by rows; elsewhere one linear over the concatenated
// weights, cast to x's dtype).
torch::Tensor Project(const torch::Tensor& x, std::initializer_list<torch::Tensor> ws);

}  // namespace trainyard::engine::regions
