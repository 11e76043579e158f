// The feed-forward side of the fused CPU kernels (declared in fused_cpu_kernels.h):
// SwiGLU, Linear over weights side by side, and the routed experts as one grouped op.
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <torch/library.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "worker/engine/kernels/cpu/cpu_blas.h"
#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"
#include "worker/engine/kernels/cpu/no_grad_kernel.h"
#include "worker/engine/kernels/cpu/row_loops.h"
#include "worker/engine/kernels/reference_ops.h"

#ifndef _OPENMP
#error "fused_ffn_kernels.cc must be compiled with OpenMP: at::parallel_for is serial without it"
#endif

namespace trainyard::engine::fused {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// ---- SwiGLU ---------------------------------------------------------------------
// h: [rows, 2·hidden] contiguous, the w1 and w3 projections side by side. Writes
// sig = σ(h[:, :hidden]) and out = silu(h[:, :hidden])·h[:, hidden:].
void SwiGluForward(const Tensor& h, Tensor& sig, Tensor& out) {
  const int64_t hidden = h.size(-1) / 2, rows = h.numel() / h.size(-1);
  // ATen's sigmoid is vectorised (runtime-dispatched AVX2/AVX-512); kept for backward.
  sig = torch::sigmoid(h.narrow(-1, 0, hidden)).contiguous();
  const float *hp = h.data_ptr<float>(), *sp = sig.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows, 16,
                   [&](int64_t begin, int64_t end) { loops::SwiGluForward(hp, sp, op, begin, end, hidden); });
}

// dh (same shape as h) from the output gradient g: [rows, hidden].
void SwiGluBackward(const Tensor& h, const Tensor& sig, const Tensor& g, Tensor& dh) {
  const int64_t hidden = h.size(-1) / 2, rows = h.numel() / h.size(-1);
  const float *hp = h.data_ptr<float>(), *sp = sig.data_ptr<float>(), *gp = g.data_ptr<float>();
  float* dp = dh.data_ptr<float>();
  at::parallel_for(0, rows, 16,
                   [&](int64_t begin, int64_t end) { loops::SwiGluBackward(hp, sp, gp, dp, begin, end, hidden); });
}

class SwiGluFn : public torch::autograd::Function<SwiGluFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& h_in) {
    RECORD_FUNCTION("trainyard::fused_swiglu_forward", std::vector<c10::IValue>());
    const Tensor h = h_in.contiguous();
    auto out_sizes = h.sizes().vec();
    out_sizes.back() /= 2;
    Tensor sig, out = at::empty(out_sizes, h.options());
    SwiGluForward(h, sig, out);
    ctx->save_for_backward({h, sig});
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    Tensor dh = at::empty_like(saved[0]);
    SwiGluBackward(saved[0], saved[1], grads[0].contiguous(), dh);
    return {dh};
  }
};

// ---- Linear ----------------------------------------------------------------------
// y = x·[w_0; w_1; ...]ᵀ without concatenating the weights: output columns
// [off_i, off_i + n_i) come from w_i. Forward and the input gradient split their token
// rows across the intra-op threads, and each weight gradient its rows (all of
// cpu_blas::SplitGemm). No multiply here wakes OpenBLAS's own thread pool: its threads
// keep spinning after a call and slowed the whole step (915–989 ms a debug step with
// the weight gradients on OpenBLAS's threads, 615–691 ms without, measured in
// alternation).
class LinearFn : public torch::autograd::Function<LinearFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, at::TensorList weights) {
    RECORD_FUNCTION("trainyard::fused_linear_forward", std::vector<c10::IValue>());
    const Tensor x = x_in.contiguous();
    const int64_t k = x.size(-1), rows = x.numel() / k;
    std::vector<Tensor> saved{x};
    int64_t n = 0;
    for (const Tensor& w : weights) {
      saved.push_back(w.contiguous());
      n += w.size(0);
    }
    auto out_sizes = x.sizes().vec();
    out_sizes.back() = n;
    Tensor y = at::empty(out_sizes, x.options());
    int64_t off = 0;
    for (size_t i = 1; i < saved.size(); ++i) {
      const Tensor& w = saved[i];
      cpu_blas::SplitGemm(false, true, rows, w.size(0), k, 1, x.data_ptr<float>(), k, w.data_ptr<float>(), k, 0,
                          y.data_ptr<float>() + off, n);
      off += w.size(0);
    }
    ctx->save_for_backward(saved);
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor& x = saved[0];
    const Tensor dy = grads[0].contiguous();
    const int64_t k = x.size(-1), rows = x.numel() / k, n = dy.size(-1);
    tensor_list out(saved.size());
    if (ctx->needs_input_grad(0)) {
      RECORD_FUNCTION("trainyard::linear_input_grad", std::vector<c10::IValue>());
      out[0] = at::empty_like(x);
      int64_t off = 0;
      for (size_t i = 1; i < saved.size(); ++i) {
        const Tensor& w = saved[i];
        cpu_blas::SplitGemm(false, false, rows, k, w.size(0), 1, dy.data_ptr<float>() + off, n, w.data_ptr<float>(), k,
                            i == 1 ? 0 : 1, out[0].data_ptr<float>(), k);
        off += w.size(0);
      }
    }
    RECORD_FUNCTION("trainyard::linear_weight_grad", std::vector<c10::IValue>());
    int64_t off = 0;
    for (size_t i = 1; i < saved.size(); ++i) {
      const Tensor& w = saved[i];
      if (ctx->needs_input_grad(i)) {
        out[i] = at::empty_like(w);
        cpu_blas::SplitGemm(true, false, w.size(0), k, rows, 1, dy.data_ptr<float>() + off, n, x.data_ptr<float>(), k,
                            0, out[i].data_ptr<float>(), k);
      }
      off += w.size(0);
    }
    return out;
  }
};

// ---- Routed experts ----------------------------------------------------------------
// Expert e owns rows [o_e, o_e + c_e) of x. Per expert, h_e = x_e·[w1_e; w3_e]ᵀ goes
// into rows of one [rows, 2·hidden] buffer, SwiGLU runs once over all rows, and
// y_e = a_e·w2_eᵀ. Backward writes each expert's weight gradients straight into the
// [E, ...] gradients: no per-expert unbind/stack, split/cat or weight concatenation.
class GroupedExpertsFn : public torch::autograd::Function<GroupedExpertsFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, const std::vector<int64_t>& counts,
                        const Tensor& w1_in, const Tensor& w2_in, const Tensor& w3_in) {
    RECORD_FUNCTION("trainyard::fused_experts_forward", std::vector<c10::IValue>());
    const Tensor x = x_in.contiguous(), w1 = w1_in.contiguous(), w2 = w2_in.contiguous(), w3 = w3_in.contiguous();
    const int64_t rows = x.size(0), dim = x.size(1), hidden = w1.size(1);
    Tensor h = at::empty({rows, 2 * hidden}, x.options());
    Tensor act = at::empty({rows, hidden}, x.options());
    Tensor y = at::empty({rows, dim}, x.options());
    const float *xp = x.data_ptr<float>(), *w1p = w1.data_ptr<float>(), *w3p = w3.data_ptr<float>();
    float* hp = h.data_ptr<float>();
    int64_t o = 0;
    for (size_t e = 0; e < counts.size(); o += counts[e], ++e) {
      const int64_t c = counts[e];
      if (c == 0) continue;
      const int64_t wo = static_cast<int64_t>(e) * hidden * dim;
      cpu_blas::SplitGemm(false, true, c, hidden, dim, 1, xp + o * dim, dim, w1p + wo, dim, 0, hp + o * 2 * hidden,
                          2 * hidden);
      cpu_blas::SplitGemm(false, true, c, hidden, dim, 1, xp + o * dim, dim, w3p + wo, dim, 0,
                          hp + o * 2 * hidden + hidden, 2 * hidden);
    }
    Tensor sig;
    SwiGluForward(h, sig, act);
    const float *ap = act.data_ptr<float>(), *w2p = w2.data_ptr<float>();
    o = 0;
    for (size_t e = 0; e < counts.size(); o += counts[e], ++e) {
      if (counts[e] == 0) continue;
      cpu_blas::SplitGemm(false, true, counts[e], dim, hidden, 1, ap + o * hidden, hidden,
                          w2p + static_cast<int64_t>(e) * dim * hidden, hidden, 0, y.data_ptr<float>() + o * dim, dim);
    }
    ctx->save_for_backward({x, w1, w2, w3, h, sig, act});
    ctx->saved_data["counts"] = c10::IValue(counts);
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w1 = saved[1], &w2 = saved[2], &w3 = saved[3], &h = saved[4], &sig = saved[5],
                 &act = saved[6];
    const std::vector<int64_t> counts = ctx->saved_data["counts"].toIntVector();
    const Tensor dy = grads[0].contiguous();
    const int64_t rows = x.size(0), dim = x.size(1), hidden = w1.size(1);
    Tensor dact = at::empty({rows, hidden}, x.options());
    Tensor dh = at::empty({rows, 2 * hidden}, x.options());
    Tensor dx = at::empty_like(x);
    // Experts with no rows get zero weight gradients, as the per-expert form gives.
    Tensor dw1 = at::zeros_like(w1), dw2 = at::zeros_like(w2), dw3 = at::zeros_like(w3);
    const float *xp = x.data_ptr<float>(), *dyp = dy.data_ptr<float>(), *ap = act.data_ptr<float>();
    const float *w1p = w1.data_ptr<float>(), *w2p = w2.data_ptr<float>(), *w3p = w3.data_ptr<float>();
    float *dap = dact.data_ptr<float>(), *dhp = dh.data_ptr<float>(), *dxp = dx.data_ptr<float>();
    int64_t o = 0;
    for (size_t e = 0; e < counts.size(); o += counts[e], ++e) {
      const int64_t c = counts[e], we = static_cast<int64_t>(e) * dim * hidden;
      if (c == 0) continue;
      cpu_blas::SplitGemm(false, false, c, hidden, dim, 1, dyp + o * dim, dim, w2p + we, hidden, 0, dap + o * hidden,
                          hidden);
      cpu_blas::SplitGemm(true, false, dim, hidden, c, 1, dyp + o * dim, dim, ap + o * hidden, hidden, 0,
                          dw2.data_ptr<float>() + we, hidden);
    }
    SwiGluBackward(h, sig, dact, dh);
    o = 0;
    for (size_t e = 0; e < counts.size(); o += counts[e], ++e) {
      const int64_t c = counts[e], we = static_cast<int64_t>(e) * hidden * dim;
      if (c == 0) continue;
      const float *dh1 = dhp + o * 2 * hidden, *dh3 = dh1 + hidden;
      cpu_blas::SplitGemm(false, false, c, dim, hidden, 1, dh1, 2 * hidden, w1p + we, dim, 0, dxp + o * dim, dim);
      cpu_blas::SplitGemm(false, false, c, dim, hidden, 1, dh3, 2 * hidden, w3p + we, dim, 1, dxp + o * dim, dim);
      cpu_blas::SplitGemm(true, false, hidden, dim, c, 1, dh1, 2 * hidden, xp + o * dim, dim, 0,
                          dw1.data_ptr<float>() + we, dim);
      cpu_blas::SplitGemm(true, false, hidden, dim, c, 1, dh3, 2 * hidden, xp + o * dim, dim, 0,
                          dw3.data_ptr<float>() + we, dim);
    }
    return {dx, Tensor(), dw1, dw2, dw3};
  }
};

// ---- Combine ------------------------------------------------------------------------
// out[t] = Σ gates[r]·y[r] over the rows r with token_ids[r] = t, in increasing r: the
// order index_add on zeros adds them in. Each
// token's rows are found with one counting sort; tokens run in parallel.
struct RowsOfTokens {
  std::vector<int64_t> start, rows;  // token t's rows: rows[start[t] .. start[t + 1])
};

RowsOfTokens GroupRowsByToken(const Tensor& token_ids, int64_t n_tokens) {
  const int64_t* ids = token_ids.data_ptr<int64_t>();
  const int64_t r = token_ids.numel();
  RowsOfTokens g{std::vector<int64_t>(n_tokens + 1, 0), std::vector<int64_t>(r)};
  for (int64_t i = 0; i < r; ++i) {
    TORCH_CHECK(ids[i] >= 0 && ids[i] < n_tokens, "fused combine: token id ", ids[i], " outside [0, ", n_tokens, ")");
    ++g.start[ids[i] + 1];
  }
  for (int64_t t = 0; t < n_tokens; ++t) g.start[t + 1] += g.start[t];
  std::vector<int64_t> next(g.start.begin(), g.start.end() - 1);
  for (int64_t i = 0; i < r; ++i) g.rows[next[ids[i]]++] = i;
  return g;
}

class CombineFn : public torch::autograd::Function<CombineFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& y_in, const Tensor& gates_in, const Tensor& token_ids_in,
                        int64_t n_tokens) {
    const Tensor y = y_in.contiguous(), gates = gates_in.contiguous(), token_ids = token_ids_in.contiguous();
    const int64_t dim = y.size(1);
    const RowsOfTokens g = GroupRowsByToken(token_ids, n_tokens);
    Tensor out = at::empty({n_tokens, dim}, y.options());
    const float *yp = y.data_ptr<float>(), *gp = gates.data_ptr<float>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, n_tokens, 16, [&](int64_t begin, int64_t end) {
      loops::CombineForward(yp, gp, g.start.data(), g.rows.data(), op, begin, end, dim);
    });
    ctx->save_for_backward({y, gates, token_ids});
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &y = saved[0], &gates = saved[1], &token_ids = saved[2];
    const Tensor dout = grads[0].contiguous();
    const int64_t rows = y.size(0), dim = y.size(1);
    Tensor dy = at::empty_like(y), dgates = at::empty_like(gates);
    const float *yp = y.data_ptr<float>(), *gp = gates.data_ptr<float>(), *dp = dout.data_ptr<float>();
    const int64_t* ids = token_ids.data_ptr<int64_t>();
    float *dyp = dy.data_ptr<float>(), *dgp = dgates.data_ptr<float>();
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      loops::CombineBackward(yp, gp, ids, dp, dyp, dgp, begin, end, dim);
    });
    return {dy, dgates, Tensor(), Tensor()};
  }
};

Tensor SwiGluKernel(const Tensor& h) {
  if (!Applies(h)) return reference::SwiGlu(h);
  reference::CheckSwiGluArgs(h);
  return SwiGluFn::apply(h);
}

Tensor LinearKernel(const Tensor& x, at::TensorList weights) {
  if (!Applies(x)) return reference::Linear(x, weights);
  TORCH_CHECK(!weights.empty(), "fused linear: no weights");
  TORCH_CHECK(x.dim() >= 1, "fused linear: input must have a dimension");
  for (const auto& w : weights) {
    TORCH_CHECK(
        w.dim() == 2 && w.size(1) == x.size(-1) && w.scalar_type() == x.scalar_type() && w.device() == x.device(),
        "fused linear: weight ", w.sizes(), " for input ", x.sizes());
  }
  return LinearFn::apply(x, weights);
}

// starts: int64 [E]; expert e's rows begin at starts[e] and end where expert e + 1's
// begin, the last expert's at the end of x. (Start offsets rather than counts keep
// the rows dimension free: one more row is one more row of the last expert, so a
// traced region with dynamic rows stays valid for any row count.)
Tensor GroupedExpertsKernel(const Tensor& x, const Tensor& starts_in, const Tensor& w1, const Tensor& w2,
                            const Tensor& w3) {
  if (!Applies(x)) return reference::GroupedExperts(x, starts_in, w1, w2, w3);
  reference::CheckExpertShapes(x, w1, w2, w3);
  const std::vector<int64_t> counts = reference::ExpertCounts(starts_in, x.size(0), w1.size(0));
  return GroupedExpertsFn::apply(x, counts, w1, w2, w3);
}

Tensor CombineKernel(const Tensor& y, const Tensor& gates, const Tensor& token_ids, int64_t n_tokens) {
  if (!Applies(y)) return reference::Combine(y, gates, token_ids, n_tokens);
  reference::CheckCombineArgs(y, gates, token_ids, n_tokens);
  return CombineFn::apply(y, gates, token_ids, n_tokens);
}

}  // namespace

// Schemas and the reference in ../ops.cc; the AutogradCPU and CPU keys as in
// fused_cpu_kernels.cc.
TORCH_LIBRARY_IMPL(trainyard, AutogradCPU, m) {
  m.impl("linear", &LinearKernel);
  m.impl("swiglu", &SwiGluKernel);
  m.impl("grouped_experts", &GroupedExpertsKernel);
  m.impl("combine", &CombineKernel);
}

TORCH_LIBRARY_IMPL(trainyard, CPU, m) {
  m.impl("linear", &NoGrad<decltype(LinearKernel), LinearKernel>::Call);
  m.impl("swiglu", &NoGrad<decltype(SwiGluKernel), SwiGluKernel>::Call);
  m.impl("grouped_experts", &NoGrad<decltype(GroupedExpertsKernel), GroupedExpertsKernel>::Call);
  m.impl("combine", &NoGrad<decltype(CombineKernel), CombineKernel>::Call);
}

void LinkFfnKernels() {}

}  // namespace trainyard::engine::fused
