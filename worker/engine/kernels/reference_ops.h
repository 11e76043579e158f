// The reference implementation of every `trainyard` operator (ops.h): plain LibTorch
// composite ops, registered at CompositeImplicitAutograd so that autograd derives their
// backward and every device without a kernel of its own (CUDA, Meta, ...) runs them.
// The fused CPU kernels (cpu/fused_cpu_kernels.h) call them where they do not apply
// (bf16, or switched off). bf16 follows the mixed-precision rule of ops.h: weights are
// cast to the activations' dtype, statistics (RMSNorm, RoPE, softmax) are taken in fp32.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace trainyard::engine::reference {

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);
torch::Tensor Linear(const torch::Tensor& x, at::TensorList weights);
torch::Tensor SwiGlu(const torch::Tensor& h);
// The routed experts: GroupedExpertsGemm where it is LibTorch's grouped GEMM kernel
// (GroupedGemmApplies), else GroupedExpertsLoop.
torch::Tensor GroupedExperts(const torch::Tensor& x, const torch::Tensor& starts, const torch::Tensor& w1,
                             const torch::Tensor& w2, const torch::Tensor& w3);
// All experts in one at::_grouped_mm per weight over int32 end offsets (no host loop).
torch::Tensor GroupedExpertsGemm(const torch::Tensor& x, const torch::Tensor& starts, const torch::Tensor& w1,
                                 const torch::Tensor& w2, const torch::Tensor& w3);
// The named fallback: one SwiGLU FFN per non-empty expert on its rows (a split of x by
// the host-known counts; three GEMMs per expert).
torch::Tensor GroupedExpertsLoop(const torch::Tensor& x, const torch::Tensor& starts, const torch::Tensor& w1,
                                 const torch::Tensor& w2, const torch::Tensor& w3);
// True for bf16 on CUDA with dim and hidden multiples of 8 (the 16-byte strides
// at::_grouped_mm requires), where it is a CUTLASS kernel on sm90 and sm100. (On other
// GPUs LibTorch falls back by itself, copying the offsets to the host once
// per call and looping over groups, and logs "fallback path for torch._grouped_mm". On
// CPU, and for fp32, its fallback reads every offset on the host; the loop reads none.)
bool GroupedGemmApplies(c10::Device device, c10::ScalarType dtype, int64_t dim, int64_t hidden);
torch::Tensor Combine(const torch::Tensor& y, const torch::Tensor& gates, const torch::Tensor& token_ids,
                      int64_t n_tokens);
// RoPE on q and k, then CausalSdpa; query_block is the fused kernel's tiling and
// does not change the result.
torch::Tensor CausalAttention(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin,
                              int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block);

// x [b, t, heads, head_dim] rotated pairwise by the [t, head_dim] tables (sin carries the
// pair's sign): x·cos + swap(x)·sin.
torch::Tensor Rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// Causal attention through at::scaled_dot_product_attention, scale 1/sqrt(head_dim):
// q [b, H, t, hd], k and v [b, K, t, hd] with H a multiple of K; query head h reads KV
// head h / (H / K). With `expand_kv` K and V are first repeated to H heads; otherwise
// enable_gqa pairs them in place. LibTorch then picks its kernel: on CPU the flash
// kernel (fp32 and bf16, GQA included); on CUDA flash (bf16/fp16, GQA included) or
// memory-efficient attention, neither of which materialises the t×t scores.
torch::Tensor CausalSdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool expand_kv);

// True where LibTorch has no SDPA kernel for grouped-query attention in x's dtype and
// device and would fall back to its math path (all t×t scores kept): fp32 GQA on CUDA
// (flash takes no fp32, memory-efficient no GQA). K/V are then repeated instead.
bool SdpaExpandsKv(const torch::Tensor& x, int64_t n_heads, int64_t n_kv_heads);

// The operators' argument checks, shared by every kernel of each (c10::Error naming
// the shapes).
void CheckAttentionArgs(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin, int64_t n_heads,
                        int64_t n_kv_heads, int64_t head_dim, int64_t query_block);
void CheckRmsNormArgs(const torch::Tensor& x, const torch::Tensor& weight);
void CheckSwiGluArgs(const torch::Tensor& h);
void CheckExpertShapes(const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w2,
                       const torch::Tensor& w3);
void CheckCombineArgs(const torch::Tensor& y, const torch::Tensor& gates, const torch::Tensor& token_ids,
                      int64_t n_tokens);

// Rows per expert from the operator's start offsets (int64 CPU [E], from 0, not
// decreasing; the last expert ends at `rows`), checked, with a precise error.
std::vector<int64_t> ExpertCounts(const torch::Tensor& starts, int64_t rows, int64_t n_experts);

}  // namespace trainyard::engine::reference
