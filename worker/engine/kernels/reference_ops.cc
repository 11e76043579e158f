#include "worker/engine/kernels/reference_ops.h"

#include <cmath>
#include <limits>

#include "worker/engine/kernels/ops.h"

namespace trainyard::engine::reference {

using ops::AsComputeType;
using ops::IsReducedPrecision;
using torch::Tensor;
namespace F = torch::nn::functional;

void CheckRmsNormArgs(const Tensor& x, const Tensor& weight) {
  TORCH_CHECK(weight.dim() == 1 && x.dim() >= 1 && x.size(-1) == weight.size(0), "rms_norm: weight ", weight.sizes(),
              " for input ", x.sizes());
}

void CheckSwiGluArgs(const Tensor& h) {
  TORCH_CHECK(h.dim() >= 1 && h.size(-1) % 2 == 0, "swiglu: last dimension must be even, got ", h.sizes());
}

Tensor RmsNorm(const Tensor& x, const Tensor& weight, double eps) {
  CheckRmsNormArgs(x, weight);
  if (IsReducedPrecision(x)) {
    // Normalise in fp32, then scale by the weight in the compute dtype (torchtitan's
    // RMSNorm: norm(x.float()).type_as(x) * weight).
    auto xf = x.to(torch::kFloat);
    return (xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps)).to(x.scalar_type()) *
           AsComputeType(weight, x);
  }
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
}

Tensor Linear(const Tensor& x, at::TensorList weights) {
  TORCH_CHECK(!weights.empty(), "linear: no weights");
  if (weights.size() == 1) return F::linear(x, AsComputeType(weights[0], x));
  // One GEMM per weight, outputs side by side: the GEMMs save the weights themselves for
  // backward, where a concatenated weight would be a saved copy of all of them.
  std::vector<Tensor> outs;
  outs.reserve(weights.size());
  for (const Tensor& w : weights) outs.push_back(F::linear(x, AsComputeType(w, x)));
  return torch::cat(outs, -1);
}

Tensor SwiGlu(const Tensor& h) {
  CheckSwiGluArgs(h);
  const int64_t hidden = h.size(-1) / 2;
  return torch::silu(h.narrow(-1, 0, hidden)) * h.narrow(-1, hidden, hidden);
}

std::vector<int64_t> ExpertCounts(const Tensor& starts_in, int64_t rows, int64_t n_experts) {
  TORCH_CHECK(starts_in.dim() == 1 && starts_in.scalar_type() == torch::kInt64 && starts_in.device().is_cpu(),
              "grouped experts: starts must be an int64 CPU vector, got ", starts_in.sizes());
  TORCH_CHECK(starts_in.size(0) == n_experts, "grouped experts: ", starts_in.size(0), " starts for ", n_experts,
              " experts");
  const Tensor starts = starts_in.contiguous();
  const int64_t* s = starts.data_ptr<int64_t>();
  std::vector<int64_t> counts(n_experts);
  for (int64_t e = 0; e < n_experts; ++e) {
    const int64_t end = e + 1 < n_experts ? s[e + 1] : rows;
    TORCH_CHECK((e > 0 || s[0] == 0) && s[e] <= end && end <= rows, "grouped experts: expert ", e, " starts at row ",
                s[e], " and ends at ", end, " of ", rows, " (starts must begin at 0 and not decrease)");
    counts[e] = end - s[e];
  }
  return counts;
}

void CheckExpertShapes(const Tensor& x, const Tensor& w1, const Tensor& w2, const Tensor& w3) {
  TORCH_CHECK(x.dim() == 2 && w1.dim() == 3 && w1.sizes() == w3.sizes() && w2.dim() == 3 && w2.size(0) == w1.size(0) &&
                  w2.size(1) == w1.size(2) && w2.size(2) == w1.size(1) && x.size(1) == w1.size(2),
              "grouped experts: x ", x.sizes(), " with w1 ", w1.sizes(), ", w2 ", w2.sizes(), ", w3 ", w3.sizes());
}

void CheckCombineArgs(const Tensor& y, const Tensor& gates, const Tensor& token_ids, int64_t n_tokens) {
  TORCH_CHECK(y.dim() == 2 && gates.dim() == 2 && gates.size(1) == 1 && gates.size(0) == y.size(0) &&
                  token_ids.dim() == 1 && token_ids.size(0) == y.size(0) && token_ids.scalar_type() == torch::kInt64,
              "combine: y ", y.sizes(), ", gates ", gates.sizes(), ", token ids ", token_ids.sizes());
  TORCH_CHECK(n_tokens >= 0, "combine: negative token count ", n_tokens);
}

void CheckAttentionArgs(const Tensor& qkv, const Tensor& cos, const Tensor& sin, int64_t n_heads, int64_t n_kv_heads,
                        int64_t head_dim, int64_t query_block) {
  TORCH_CHECK(qkv.dim() == 3 && qkv.size(2) == (n_heads + 2 * n_kv_heads) * head_dim,
              "attention: qkv must be [b, t, (n_heads + 2·n_kv_heads)·head_dim], got ", qkv.sizes());
  TORCH_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0 && head_dim % 2 == 0 && query_block > 0,
              "attention: bad head layout");
  TORCH_CHECK(cos.dim() == 2 && cos.size(0) == qkv.size(1) && cos.size(1) == head_dim && sin.sizes() == cos.sizes(),
              "attention: RoPE tables must be [t, head_dim]");
}

bool GroupedGemmApplies(c10::Device device, c10::ScalarType dtype, int64_t dim, int64_t hidden) {
  return device.is_cuda() && dtype == torch::kBFloat16 && dim % 8 == 0 && hidden % 8 == 0;
}

Tensor GroupedExperts(const Tensor& x, const Tensor& starts, const Tensor& w1, const Tensor& w2, const Tensor& w3) {
  return GroupedGemmApplies(x.device(), x.scalar_type(), w1.size(2), w1.size(1))
             ? GroupedExpertsGemm(x, starts, w1, w2, w3)
             : GroupedExpertsLoop(x, starts, w1, w2, w3);
}

Tensor GroupedExpertsGemm(const Tensor& x, const Tensor& starts, const Tensor& w1, const Tensor& w2, const Tensor& w3) {
  CheckExpertShapes(x, w1, w2, w3);
  const std::vector<int64_t> counts = ExpertCounts(starts, x.size(0), w1.size(0));
  // Row offsets where each expert's block ends, on x's device (a host-to-device copy,
  // no synchronisation).
  std::vector<int32_t> ends(counts.size());
  int64_t end = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    end += counts[e];
    TORCH_CHECK(end <= std::numeric_limits<int32_t>::max(), "grouped experts: ", end, " rows exceed int32 offsets");
    ends[e] = static_cast<int32_t>(end);
  }
  const Tensor offs = torch::tensor(ends, torch::kInt32).to(x.device(), /*non_blocking=*/true);
  auto gmm = [&](const Tensor& a, const Tensor& w) {
    return at::_grouped_mm(a, AsComputeType(w, a).transpose(-2, -1), offs);
  };
  return gmm(torch::silu(gmm(x, w1)) * gmm(x, w3), w2);
}

Tensor GroupedExpertsLoop(const Tensor& x, const Tensor& starts, const Tensor& w1, const Tensor& w2, const Tensor& w3) {
  CheckExpertShapes(x, w1, w2, w3);
  const std::vector<int64_t> counts = ExpertCounts(starts, x.size(0), w1.size(0));
  // One unbind per weight instead of w[e] per expert: select's backward would build a
  // full-size zero gradient per expert and sum them; unbind's backward stacks once. One
  // split instead of a narrow per expert, for the same reason on x.
  const auto w1s = AsComputeType(w1, x).unbind(0), w2s = AsComputeType(w2, x).unbind(0),
             w3s = AsComputeType(w3, x).unbind(0);
  const auto pieces = x.split_with_sizes(counts, 0);
  std::vector<Tensor> outs;
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] == 0) continue;
    outs.push_back(F::linear(torch::silu(F::linear(pieces[e], w1s[e])) * F::linear(pieces[e], w3s[e]), w2s[e]));
  }
  // Keep an empty result attached to x's graph: under expert parallelism the backward
  // all-to-all behind x must run on every rank, even one whose experts got no rows.
  if (outs.empty()) return x.narrow(0, 0, 0) * 0;
  return outs.size() == 1 ? outs[0] : torch::cat(outs, 0);
}

Tensor Combine(const Tensor& y, const Tensor& gates, const Tensor& token_ids, int64_t n_tokens) {
  CheckCombineArgs(y, gates, token_ids, n_tokens);
  // bf16: expert rows times fp32 gates, back to the rows' dtype before the sum.
  auto weighted = y * gates;
  if (weighted.scalar_type() != y.scalar_type()) weighted = weighted.to(y.scalar_type());
  return torch::zeros({n_tokens, y.size(1)}, y.options()).index_add(0, token_ids, weighted);
}

Tensor Rotate(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  // out0 = x0·c - x1·s, out1 = x1·c + x0·s: the same products and sums as the pairwise form.
  auto swapped = x.reshape({x.size(0), x.size(1), x.size(2), x.size(3) / 2, 2}).flip(-1).reshape(x.sizes());
  // [seq, 1, head_dim] broadcasts over batch and heads.
  return x * cos.unsqueeze(1) + swapped * sin.unsqueeze(1);
}

bool SdpaExpandsKv(const Tensor& x, int64_t n_heads, int64_t n_kv_heads) {
  return n_heads != n_kv_heads && !x.is_cpu() && x.scalar_type() == torch::kFloat;
}

Tensor CausalSdpa(const Tensor& q, const Tensor& k, const Tensor& v, bool expand_kv) {
  const int64_t n_heads = q.size(1), n_kv_heads = k.size(1);
  TORCH_CHECK(n_heads % n_kv_heads == 0, "attention: ", n_heads, " query heads for ", n_kv_heads, " KV heads");
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  if (!expand_kv || n_heads == n_kv_heads) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/std::nullopt, /*dropout_p=*/0.0,
                                            /*is_causal=*/true, scale, /*enable_gqa=*/n_heads != n_kv_heads);
  }
  // KV head g serves query heads g·rep .. g·rep + rep - 1, as enable_gqa pairs them.
  const int64_t rep = n_heads / n_kv_heads;
  auto expand = [&](const Tensor& t) {
    return t.unsqueeze(2)
        .expand({t.size(0), n_kv_heads, rep, t.size(2), t.size(3)})
        .reshape({t.size(0), n_heads, t.size(2), t.size(3)});
  };
  return at::scaled_dot_product_attention(q, expand(k), expand(v), /*attn_mask=*/std::nullopt, /*dropout_p=*/0.0,
                                          /*is_causal=*/true, scale, /*enable_gqa=*/false);
}

Tensor CausalAttention(const Tensor& qkv, const Tensor& cos, const Tensor& sin, int64_t n_heads, int64_t n_kv_heads,
                       int64_t head_dim, int64_t query_block) {
  CheckAttentionArgs(qkv, cos, sin, n_heads, n_kv_heads, head_dim, query_block);
  const int64_t b = qkv.size(0), t = qkv.size(1), hd = head_dim;
  // One RoPE pass over the q and k heads together (in fp32 for bf16 activations).
  auto qk = qkv.narrow(-1, 0, (n_heads + n_kv_heads) * hd).view({b, t, n_heads + n_kv_heads, hd});
  qk = IsReducedPrecision(qkv) ? Rotate(qk.to(torch::kFloat), cos, sin).to(qkv.scalar_type()) : Rotate(qk, cos, sin);
  // [b, heads, t, hd] views of the [b, t, heads, hd] rows: SDPA takes strided inputs,
  // and its output transposed back is contiguous rows again.
  auto q = qk.narrow(2, 0, n_heads).transpose(1, 2);
  auto k = qk.narrow(2, n_heads, n_kv_heads).transpose(1, 2);
  auto v = qkv.narrow(-1, (n_heads + n_kv_heads) * hd, n_kv_heads * hd).view({b, t, n_kv_heads, hd}).transpose(1, 2);
  auto out = CausalSdpa(q, k, v, SdpaExpandsKv(qkv, n_heads, n_kv_heads));
  return out.transpose(1, 2).reshape({b, t, n_heads * hd});
}

}  // namespace trainyard::engine::reference
