// The engine's operators: the `trainyard` library of LibTorch custom ops that the model
// calls, with no device or dtype branch of its own. The dispatcher picks the kernel:
//
//   AutogradCPU / CPU   the fused CPU kernels (cpu/fused_cpu_kernels.h) on float32 when
//                       switched on; they hand every other case to the reference.
//   everything else     the reference (reference_ops.h), registered at
//                       CompositeImplicitAutograd: composite LibTorch ops whose backward
//                       autograd derives (SDPA for attention, at::_grouped_mm for the
//                       experts), so CUDA runs LibTorch's own kernels through it.
//
// A new kernel for a device (a CUDA grouped GEMM, an MLA kernel) is a registration at
// that device's Autograd key (AutogradCUDA: a function of differentiable ops, or an
// autograd::Function with its own backward, as the CPU kernels are), plus the device key
// itself for calls below autograd; no model code changes. A kernel at the device key
// alone would take the device's calls away from the reference's derived backward. The tracer records
// each call as one graph node (`trainyard::rms_norm`), so a traced region runs the same
// kernels as the eager model.
//
// Mixed precision (training.mixed_precision = "bf16", torchtitan's default policy):
// the model keeps fp32 weights; each op casts the weights it uses to the activations'
// dtype (AsComputeType) inside the op, so the cast's backward hands an fp32 gradient to
// the fp32 weight; statistics stay fp32 (RMSNorm normalises in fp32, RoPE rotates in
// fp32, attention's softmax and the router's scores run in fp32). In an fp32 model every
// cast is the identity, so the fp32 path runs exactly the ops it ran before bf16.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trainyard::engine::ops {

// `w` in `like`'s dtype: `w` itself when they agree (fp32), else a differentiable cast.
inline torch::Tensor AsComputeType(const torch::Tensor& w, const torch::Tensor& like) {
  return w.scalar_type() == like.scalar_type() ? w : w.to(like.scalar_type());
}

// True for activations in a reduced precision (bf16), whose statistics are taken in fp32.
inline bool IsReducedPrecision(const torch::Tensor& x) {
  return x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf;
}

// trainyard::causal_attention. qkv: [b, t, (n_heads + 2·n_kv_heads)·head_dim], the q, k,
// v projections side by side (head h of q at columns h·head_dim, KV head g of k at
// (n_heads + g)·head_dim, of v at (n_heads + n_kv_heads + g)·head_dim). cos/sin:
// [t, head_dim] RotaryEmbedding tables. Query head h attends with KV head
// h / (n_heads / n_kv_heads), to keys at positions up to its own, with scores scaled by
// 1/sqrt(head_dim). Returns [b, t, n_heads·head_dim] in head order. Differentiable in
// qkv. query_block is the fused kernel's tiling (results do not depend on it).
torch::Tensor CausalAttention(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin,
                              int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block);

// trainyard::linear. x·[weights[0]; weights[1]; ...]ᵀ: [..., Σ n_i] for x [..., k] and
// weights [n_i, k]. Differentiable in x and every weight.
torch::Tensor Linear(const torch::Tensor& x, at::TensorList weights);

// trainyard::grouped_experts. Routed experts over rows sorted by expert: expert e's rows
// begin at starts[e] (int64 CPU [E], from 0, not decreasing) and end where expert e + 1's
// begin, the last expert's at the end of x; w1, w3: [E, hidden, dim], w2: [E, dim,
// hidden]. Row block e of the result is (silu(x_e·w1[e]ᵀ) ⊙ x_e·w3[e]ᵀ)·w2[e]ᵀ.
// Differentiable in x, w1, w2 and w3. Start offsets rather than counts keep the rows
// dimension free: a traced region with dynamic rows stays valid for any row count.
torch::Tensor GroupedExpertsAtStarts(const torch::Tensor& x, const torch::Tensor& starts, const torch::Tensor& w1,
                                     const torch::Tensor& w2, const torch::Tensor& w3);

// The same with counts[e] rows for expert e (they must sum to x's rows).
torch::Tensor GroupedExperts(const torch::Tensor& x, const std::vector<int64_t>& counts, const torch::Tensor& w1,
                             const torch::Tensor& w2, const torch::Tensor& w3);

// The start offsets of experts with `counts` rows each, as GroupedExpertsAtStarts takes
// them; with rows >= 0, the counts must sum to it (c10::Error otherwise).
torch::Tensor ExpertStarts(const std::vector<int64_t>& counts, int64_t rows = -1);

// trainyard::combine. out[t] = Σ gates[r]·y[r] over rows r with token_ids[r] = t (zero
// for tokens with no rows), in increasing r. y: [rows, dim], gates: [rows, 1] (fp32 in
// bf16 runs; the products are rounded to y's dtype before the sum), token_ids: [rows]
// int64. Returns [n_tokens, dim] in y's dtype. Differentiable in y and gates.
torch::Tensor Combine(const torch::Tensor& y, const torch::Tensor& gates, const torch::Tensor& token_ids,
                      int64_t n_tokens);

// trainyard::rms_norm. x · rsqrt(mean(x², -1) + eps) · weight over the last dimension
// (in fp32 for bf16 x, scaled by the weight in x's dtype, as torchtitan's RMSNorm).
// Differentiable in x and weight.
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// trainyard::swiglu. h: [..., 2·hidden], the w1 and w3 projections side by side.
// Returns silu(h[..., :hidden]) · h[..., hidden:], [..., hidden]. Differentiable in h.
torch::Tensor SwiGlu(const torch::Tensor& h);

// The kernel trainyard::grouped_experts and trainyard::causal_attention run for
// activations on `device` in `dtype`, in words (trainyard-rank's start line names them):
// "fused CPU kernel", "at::_grouped_mm (grouped GEMM)", "per-expert loop",
// "scaled_dot_product_attention".
std::string ExpertKernelName(c10::Device device, c10::ScalarType dtype, int64_t dim, int64_t expert_hidden);
std::string AttentionKernelName(c10::Device device, c10::ScalarType dtype);

}  // namespace trainyard::engine::ops
