// Fused CPU kernels, each a LibTorch custom operator in the `trainyard` namespace with a
// CPU kernel and an autograd kernel (a custom autograd function with a hand-written
// backward). They compute what the model's composite regions (model/layers,
// model/moe) compute (same math, different summation order: results agree to fp32
// rounding) in fewer passes over memory:
//
//   trainyard::causal_attention  RoPE + causal grouped-query attention, from the fused
//                    q/k/v projection to the heads' output, in query blocks that skip the
//                    masked upper triangle. LibTorch's CPU bmm without MKL runs one
//                    multi-threaded BLAS call per batch matrix, one at a time; this
//                    kernel runs the (batch, KV head) groups in parallel with
//                    single-threaded BLAS calls on group-major q/k/output buffers
//                    (RoPE writes them; one call covers all of a group's query heads),
//                    reads v in place, and masks the future while scoring.
//   trainyard::linear  x·Wᵀ for one or more weights side by side (q|k|v, w1|w3) without
//                    concatenating them, forward and input gradient split over the
//                    intra-op threads by token rows (see cpu_blas.h for why).
//   trainyard::grouped_experts  a layer's routed experts (SwiGLU FFNs over rows sorted
//                    by expert) as one op: per-expert GEMMs on row slices of shared
//                    buffers, weight gradients written into the [E, ...] gradients.
//   trainyard::combine  the MoE combine, Σ gate·expert output per token, in one pass
//                    each way (parallel over tokens, same summation order as index_add).
//   trainyard::rms_norm  one pass forward, one pass backward (per-thread weight
//                    gradients).
//   trainyard::swiglu  silu(a)·b over the halves of the fused w1|w3 projection, so the
//                    FFN runs one GEMM for w1 and w3 and one pass for the activation's
//                    backward.
//   SumOfSquares     (a plain function) the gradient-norm reduction, in float64, in
//                    one pass.
//
// Because they are operators, an eager call and a traced TorchScript graph run the same
// kernel: the tracer records each call as one node (`trainyard::rms_norm`), and the
// graph executor calls it through the dispatcher with its autograd kernel. So the jit
// backend's step on CPU is the fused step, with the compile layer's guards, keys and
// side-effect checks unchanged. The regions use them where they apply (see Applies):
// float32 CPU tensors, switched on, and an sgemm in the process (oneDNN's or CBLAS's,
// cpu_blas.h). Everywhere else
// (CUDA, where NNC/nvFuser fuse the composite forms; bf16; TRAINYARD_FUSED_CPU_KERNELS=0)
// the regions run their composite form, which stays the reference; for attention that
// is LibTorch's scaled_dot_product_attention. The parallel loops
// are at::parallel_for, which is OpenMP only in TUs compiled with -fopenmp (see
// worker/engine/CMakeLists.txt).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace trainyard::engine::fused {

// True when the fused kernels may run on `x`.
bool Applies(const torch::Tensor& x);

// True when the fused kernels are switched on and the process has an sgemm: they
// then run on every float32 CPU tensor, eager or traced.
bool Enabled();

// Process-wide switch (on by default); trainyard-rank turns it off when its environment
// has TRAINYARD_FUSED_CPU_KERNELS=0, for A/B figures.
void SetEnabled(bool enabled);

// True when the attention region may run trainyard::causal_attention on `x`: Applies,
// and the fused attention not switched off on its own. Where it is not, the region runs
// LibTorch's scaled_dot_product_attention (its flash kernel on CPU).
bool AttentionApplies(const torch::Tensor& x);

// Switches the fused attention alone (on by default), for A/B figures against SDPA.
void SetAttentionEnabled(bool enabled);

// SetEnabled(false) when this process's environment has TRAINYARD_FUSED_CPU_KERNELS=0,
// SetAttentionEnabled(false) when it has TRAINYARD_FUSED_ATTENTION=0 (trainyard-rank
// and trainyard-step-profile call it at start-up).
void SetEnabledFromEnvironment();

// qkv: [b, t, (n_heads + 2·n_kv_heads)·head_dim], the q, k, v projections side by side
// (head h of q at columns h·head_dim, KV head g of k at (n_heads + g)·head_dim, of v at
// (n_heads + n_kv_heads + g)·head_dim). cos/sin: [t, head_dim] RotaryEmbedding tables.
// Query head h attends with KV head h / (n_heads / n_kv_heads), to keys at positions
// up to its own, with scores scaled by 1/sqrt(head_dim). Returns [b, t, n_heads·head_dim]
// in head order. Differentiable in qkv only.
torch::Tensor CausalAttention(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin,
                              int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block);

// x·[weights[0]; weights[1]; ...]ᵀ: [..., Σ n_i] for x [..., k] and weights [n_i, k].
// Differentiable in x and every weight.
torch::Tensor Linear(const torch::Tensor& x, at::TensorList weights);

// Routed experts: x [rows, dim], rows sorted by expert with counts[e] rows for expert e
// (they must sum to rows); w1, w3: [E, hidden, dim], w2: [E, dim, hidden]. Row block e
// of the result is (silu(x_e·w1[e]ᵀ) ⊙ x_e·w3[e]ᵀ)·w2[e]ᵀ. Differentiable in x, w1, w2
// and w3.
torch::Tensor GroupedExperts(const torch::Tensor& x, const std::vector<int64_t>& counts, const torch::Tensor& w1,
                             const torch::Tensor& w2, const torch::Tensor& w3);

// The operator itself: expert e's rows begin at starts[e] (int64 CPU [E], starting at 0,
// not decreasing) and end where expert e + 1's begin; the last expert's end at the end
// of x. A traced call keeps working for any number of rows (they go to the last expert
// beyond the given starts), which is what a region with a dynamic rows dimension needs.
torch::Tensor GroupedExpertsAtStarts(const torch::Tensor& x, const torch::Tensor& starts, const torch::Tensor& w1,
                                     const torch::Tensor& w2, const torch::Tensor& w3);

// The start offsets of experts with `counts` rows each, as GroupedExpertsAtStarts takes them.
torch::Tensor ExpertStarts(const std::vector<int64_t>& counts);

// out[t] = Σ gates[r]·y[r] over rows r with token_ids[r] = t (zero for tokens with no
// rows), in increasing r. y: [rows, dim], gates: [rows, 1], token_ids: [rows] int64.
// Returns [n_tokens, dim]. Differentiable in y and gates.
torch::Tensor Combine(const torch::Tensor& y, const torch::Tensor& gates, const torch::Tensor& token_ids,
                      int64_t n_tokens);

// x · rsqrt(mean(x², -1) + eps) · weight, over the last dimension. Differentiable in
// x and weight.
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// h: [..., 2·hidden], the w1 and w3 projections side by side. Returns
// silu(h[..., :hidden]) · h[..., hidden:], [..., hidden]. Differentiable in h.
torch::Tensor SwiGlu(const torch::Tensor& h);

// Σ x² over a float32 CPU tensor, accumulated in float64 (the global gradient norm)
// without the float64 copy that `x.to(kFloat64).pow(2).sum()` makes.
double SumOfSquares(const torch::Tensor& x);

}  // namespace trainyard::engine::fused
