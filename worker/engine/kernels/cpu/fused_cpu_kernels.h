// Fused CPU kernels, each the CPU kernel and the autograd kernel of a LibTorch custom
// operator in the `trainyard` namespace (a custom autograd function with a hand-written
// backward). They compute what the reference operators (../reference_ops.h)
// compute (same math, different summation order: results agree to fp32
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
// They are the CPU kernels of the `trainyard` operators (../ops.h): the model calls the
// operators, and the dispatcher reaches these at the AutogradCPU and CPU keys. They run
// where Applies holds (float32 CPU tensors, switched on, and an sgemm in the process:
// oneDNN's or CBLAS's, cpu_blas.h) and hand every other call (bf16,
// TRAINYARD_FUSED_CPU_KERNELS=0; attention also with TRAINYARD_FUSED_ATTENTION=0) to the
// reference (../reference_ops.h), which is also what every other device runs. Because
// they are operators, an eager call and a traced TorchScript graph run the same kernel:
// the tracer records each call as one node (`trainyard::rms_norm`). The parallel loops
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

// True when trainyard::causal_attention on bf16 CPU activations runs the fused fp32
// kernel on their upcast copy (AttentionEnabled, bf16, CPU); its output goes back to
// bf16. Off with the fused attention, which sends bf16 to SDPA as before.
bool BFloat16AttentionApplies(const torch::Tensor& x);

// Switches the fused attention alone (on by default), for A/B figures against SDPA.
void SetAttentionEnabled(bool enabled);

// Enabled, and the fused attention not switched off on its own.
bool AttentionEnabled();

// SetEnabled(false) when this process's environment has TRAINYARD_FUSED_CPU_KERNELS=0,
// SetAttentionEnabled(false) when it has TRAINYARD_FUSED_ATTENTION=0 (trainyard-rank
// and trainyard-step-profile call it at start-up).
void SetEnabledFromEnvironment();

// Referenced from ../ops.cc so that a static link keeps the translation units that
// register the CPU kernels (LinkCpuKernels refers to LinkFfnKernels in turn).
void LinkCpuKernels();
void LinkFfnKernels();

// Σ x² over a float32 CPU tensor, accumulated in float64 (the global gradient norm)
// without the float64 copy that `x.to(kFloat64).pow(2).sum()` makes.
double SumOfSquares(const torch::Tensor& x);

}  // namespace trainyard::engine::fused
