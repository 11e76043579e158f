#include "worker/engine/kernels/ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"
#include "worker/engine/kernels/reference_ops.h"

namespace trainyard::engine {

// The schemas, and the reference at CompositeImplicitAutograd: the kernel for every
// dispatch key that has none registered directly (the CPU ones register theirs in
// cpu/fused_*_kernels.cc).
TORCH_LIBRARY(trainyard, m) {
  m.def(
      "causal_attention(Tensor qkv, Tensor cos, Tensor sin, int n_heads, int n_kv_heads, int head_dim, "
      "int query_block) -> Tensor");
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("linear(Tensor x, Tensor[] weights) -> Tensor");
  m.def("swiglu(Tensor h) -> Tensor");
  m.def("grouped_experts(Tensor x, Tensor starts, Tensor w1, Tensor w2, Tensor w3) -> Tensor");
  m.def("combine(Tensor y, Tensor gates, Tensor token_ids, int n_tokens) -> Tensor");
}

TORCH_LIBRARY_IMPL(trainyard, CompositeImplicitAutograd, m) {
  m.impl("causal_attention", &reference::CausalAttention);
  m.impl("rms_norm", &reference::RmsNorm);
  m.impl("linear", &reference::Linear);
  m.impl("swiglu", &reference::SwiGlu);
  m.impl("grouped_experts", &reference::GroupedExperts);
  m.impl("combine", &reference::Combine);
}

namespace ops {
namespace {

using torch::Tensor;

// The CPU kernels register themselves from their own translation units; a static link
// keeps an archive member only when something refers to it, so this reference keeps
// them in every binary that calls an operator.
const bool kCpuKernelsLinked = (fused::LinkCpuKernels(), true);

template <typename Sig>
c10::TypedOperatorHandle<Sig> Op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

}  // namespace

Tensor CausalAttention(const Tensor& qkv, const Tensor& cos, const Tensor& sin, int64_t n_heads, int64_t n_kv_heads,
                       int64_t head_dim, int64_t query_block) {
  static const auto op = Op<Tensor(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, int64_t, int64_t)>(
      "trainyard::causal_attention");
  return op.call(qkv, cos, sin, n_heads, n_kv_heads, head_dim, query_block);
}

Tensor Linear(const Tensor& x, at::TensorList weights) {
  static const auto op = Op<Tensor(const Tensor&, at::TensorList)>("trainyard::linear");
  return op.call(x, weights);
}

Tensor GroupedExpertsAtStarts(const Tensor& x, const Tensor& starts, const Tensor& w1, const Tensor& w2,
                              const Tensor& w3) {
  static const auto op = Op<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&)>(
      "trainyard::grouped_experts");
  return op.call(x, starts, w1, w2, w3);
}

Tensor ExpertStarts(const std::vector<int64_t>& counts, int64_t rows) {
  Tensor starts = torch::empty({static_cast<int64_t>(counts.size())}, torch::kInt64);
  int64_t* s = starts.data_ptr<int64_t>();
  int64_t o = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    TORCH_CHECK(counts[e] >= 0, "grouped experts: negative count ", counts[e]);
    s[e] = o;
    o += counts[e];
  }
  TORCH_CHECK(rows < 0 || o == rows, "grouped experts: counts sum to ", o, " but x has ", rows, " rows");
  return starts;
}

Tensor GroupedExperts(const Tensor& x, const std::vector<int64_t>& counts, const Tensor& w1, const Tensor& w2,
                      const Tensor& w3) {
  TORCH_CHECK(x.dim() == 2, "grouped experts: x must be [rows, dim], got ", x.sizes());
  return GroupedExpertsAtStarts(x, ExpertStarts(counts, x.size(0)), w1, w2, w3);
}

Tensor Combine(const Tensor& y, const Tensor& gates, const Tensor& token_ids, int64_t n_tokens) {
  static const auto op = Op<Tensor(const Tensor&, const Tensor&, const Tensor&, int64_t)>("trainyard::combine");
  return op.call(y, gates, token_ids, n_tokens);
}

Tensor RmsNorm(const Tensor& x, const Tensor& weight, double eps) {
  static const auto op = Op<Tensor(const Tensor&, const Tensor&, double)>("trainyard::rms_norm");
  return op.call(x, weight, eps);
}

std::string ExpertKernelName(c10::Device device, c10::ScalarType dtype, int64_t dim, int64_t expert_hidden) {
  if (device.is_cpu() && fused::Enabled() && dtype == torch::kFloat32) return "fused CPU kernel";
  if (reference::GroupedGemmApplies(device, dtype, dim, expert_hidden)) {
    return "at::_grouped_mm (grouped GEMM: CUTLASS on sm90/sm100, LibTorch's per-group fallback elsewhere)";
  }
  return "per-expert loop";
}

std::string AttentionKernelName(c10::Device device, c10::ScalarType dtype) {
  if (device.is_cpu() && dtype == torch::kFloat32 && fused::AttentionEnabled()) return "fused CPU kernel";
  if (device.is_cpu() && dtype == torch::kBFloat16 && fused::AttentionEnabled()) {
    return "fused CPU kernel (fp32, on the upcast bf16 projection)";
  }
  return "scaled_dot_product_attention";
}

Tensor SwiGlu(const Tensor& h) {
  static const auto op = Op<Tensor(const Tensor&)>("trainyard::swiglu");
  return op.call(h);
}

}  // namespace ops
}  // namespace trainyard::engine
