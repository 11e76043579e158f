#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"

#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <torch/library.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "worker/engine/kernels/cpu/cpu_blas.h"
#include "worker/engine/kernels/cpu/no_grad_kernel.h"
#include "worker/engine/kernels/cpu/row_loops.h"
#include "worker/engine/kernels/reference_ops.h"

#ifndef _OPENMP
#error "fused_cpu_kernels.cc must be compiled with OpenMP: at::parallel_for is serial without it"
#endif

namespace trainyard::engine::fused {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

std::atomic<bool> g_enabled{true};
std::atomic<bool> g_attention_enabled{true};

using cpu_blas::Gemm;
using SerialBlasScope = cpu_blas::SerialScope;

// Runs fn as a named range in profiler traces.
template <typename Fn>
void Phase(const char* name, Fn&& fn) {
  RECORD_FUNCTION(name, std::vector<c10::IValue>());
  fn();
}

// ---- Causal grouped-query attention ----------------------------------------------
// A group is one (batch, KV head): its rep = n_heads / n_kv_heads query heads share
// the KV head. The kernel keeps q, k and the output group-major: q and o as
// [groups, t·rep, head_dim] with rows (position, r), k as [groups, t, head_dim], so
// one BLAS call covers all of a group's query heads for a block of positions. Query
// block j covers positions [j·qb, j·qb + len) and scores keys [0, e), e = j·qb + len;
// its probabilities are stored as [len·rep, e] (masked entries are 0).
struct AttentionShape {
  int64_t b, t, nh, nkv, hd, qb;
  int64_t rep() const { return nh / nkv; }
  int64_t w() const { return (nh + 2 * nkv) * hd; }  // qkv row
  int64_t d() const { return nh * hd; }              // output row
  int64_t groups() const { return b * nkv; }
  int64_t blocks() const { return (t + qb - 1) / qb; }
  int64_t len(int64_t j) const { return std::min(qb, t - j * qb); }
  int64_t keys(int64_t j) const { return j * qb + len(j); }
  // Probabilities are block-major: block j of every group is one [groups, len·rep, e]
  // tensor at offsets[j], so the softmax runs once per block over all groups.
  // offsets[blocks()] is their total size.
  std::vector<int64_t> Offsets() const {
    std::vector<int64_t> off{0};
    for (int64_t j = 0; j < blocks(); ++j) off.push_back(off.back() + groups() * len(j) * rep() * keys(j));
    return off;
  }
  int64_t BlockSize(int64_t j) const { return len(j) * rep() * keys(j); }
};

// RoPE between the projection layout (qkv [b, t, w], heads of q then k) and the
// group-major q/k buffers. Tables from RotaryEmbedding: cos[p, 2i] = cos[p, 2i+1] =
// cos(θ_i·p), sin[p, 2i] = -sin(θ_i·p), sin[p, 2i+1] = sin(θ_i·p). Forward rotates each
// (2i, 2i+1) pair by θ_i·p; inverse applies the transpose (rotation by -θ_i·p), which
// is the gradient, and writes into the q/k columns of `qkv`.
void RopeGroupMajor(const AttentionShape& s, float* qkv, float* qg, float* kg, const float* cos, const float* sin,
                    bool inverse) {
  const int64_t hd = s.hd, rep = s.rep(), w = s.w();
  at::parallel_for(0, s.b * s.t, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t bi = row / s.t, p = row % s.t;
      const float* c = cos + p * hd;
      const float* sn = sin + p * hd;
      for (int64_t h = 0; h < s.nh + s.nkv; ++h) {
        float* x = qkv + row * w + h * hd;
        float* y = h < s.nh ? qg + ((bi * s.nkv + h / rep) * s.t * rep + p * rep + h % rep) * hd
                            : kg + ((bi * s.nkv + (h - s.nh)) * s.t + p) * hd;
        for (int64_t i = 0; i < hd; i += 2) {
          if (!inverse) {
            const float a = x[i], b = x[i + 1];
            y[i] = a * c[i] + b * sn[i];
            y[i + 1] = b * c[i + 1] + a * sn[i + 1];
          } else {
            const float a = y[i], b = y[i + 1];
            x[i] = a * c[i] + b * sn[i + 1];
            x[i + 1] = b * c[i + 1] + a * sn[i];
          }
        }
      }
    }
  });
}

// Between [b, t, n_heads·hd] (head order) and group-major [groups, t·rep, hd], in the
// direction `to_group_major` says: for one (batch, position, KV head) both hold the rep
// heads' rows contiguously.
void CopyHeads(const AttentionShape& s, float* heads, float* gm, bool to_group_major) {
  const int64_t span = s.rep() * s.hd;
  at::parallel_for(0, s.b * s.t, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t bi = row / s.t, p = row % s.t;
      for (int64_t g = 0; g < s.nkv; ++g) {
        float* h = heads + row * s.d() + g * span;
        float* m = gm + ((bi * s.nkv + g) * s.t + p) * span;
        std::memcpy(to_group_major ? m : h, to_group_major ? h : m, span * sizeof(float));
      }
    }
  });
}

// -inf for the keys after each row's position, so the softmax gives them 0.
void MaskFuture(float* scores, int64_t p0, int64_t len, int64_t rep, int64_t e) {
  for (int64_t i = 0; i < len; ++i) {
    for (int64_t r = 0; r < rep; ++r) {
      float* row = scores + (i * rep + r) * e;
      std::fill(row + p0 + i + 1, row + e, -std::numeric_limits<float>::infinity());
    }
  }
}

struct AttentionBuffers {
  const float* qkv;  // [b, t, w]; v read in place
  const float* qg;   // [groups, t·rep, hd], rotated
  const float* kg;   // [groups, t, hd], rotated
  float* probs;      // offsets.back(), block-major (AttentionShape::Offsets)
  float* og;         // [groups, t·rep, hd]
};

// Scores of every block of group g into `scores` (the probabilities' layout), with
// the future masked.
void AttentionScoresGroup(const AttentionShape& s, const std::vector<int64_t>& off, int64_t g,
                          const AttentionBuffers& buf, float* scores) {
  const int64_t rep = s.rep(), hd = s.hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* q = buf.qg + g * s.t * rep * hd;
  const float* k = buf.kg + g * s.t * hd;
  for (int64_t j = 0; j < s.blocks(); ++j) {
    const int64_t p0 = j * s.qb, rows = s.len(j) * rep, e = s.keys(j);
    float* sj = scores + off[j] + g * s.BlockSize(j);
    Gemm(false, true, rows, e, hd, scale, q + p0 * rep * hd, hd, k, hd, 0, sj, e);
    MaskFuture(sj, p0, s.len(j), rep, e);
  }
}

// O = P·V for every block of group g.
void AttentionValuesGroup(const AttentionShape& s, const std::vector<int64_t>& off, int64_t g,
                          const AttentionBuffers& buf) {
  const int64_t rep = s.rep(), hd = s.hd, w = s.w();
  const float* v = buf.qkv + (g / s.nkv) * s.t * w + (s.nh + s.nkv + g % s.nkv) * hd;
  float* o = buf.og + g * s.t * rep * hd;
  for (int64_t j = 0; j < s.blocks(); ++j) {
    const int64_t p0 = j * s.qb, rows = s.len(j) * rep, e = s.keys(j);
    Gemm(false, false, rows, hd, e, 1, buf.probs + off[j] + g * s.BlockSize(j), e, v, w, 0, o + p0 * rep * hd, hd);
  }
}

struct AttentionGrads {
  const float* dog;  // [groups, t·rep, hd], gradient of og
  float* dqg;        // [groups, t·rep, hd]
  float* dkg;        // [groups, t, hd], zeroed (accumulated)
  float* dqkv;       // [b, t, w]; v columns zeroed (accumulated)
};

void AttentionBackwardGroup(const AttentionShape& s, const std::vector<int64_t>& off, int64_t g,
                            const AttentionBuffers& buf, const AttentionGrads& grad, std::vector<float>& ds) {
  const int64_t rep = s.rep(), hd = s.hd, w = s.w();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* q = buf.qg + g * s.t * rep * hd;
  const float* k = buf.kg + g * s.t * hd;
  const int64_t v_offset = (g / s.nkv) * s.t * w + (s.nh + s.nkv + g % s.nkv) * hd;
  const float* v = buf.qkv + v_offset;
  const float* o = buf.og + g * s.t * rep * hd;
  const float* dout = grad.dog + g * s.t * rep * hd;
  float* dq = grad.dqg + g * s.t * rep * hd;
  float* dk = grad.dkg + g * s.t * hd;
  float* dv = grad.dqkv + v_offset;
  for (int64_t j = 0; j < s.blocks(); ++j) {
    const int64_t p0 = j * s.qb, rows = s.len(j) * rep, e = s.keys(j);
    const float* p = buf.probs + off[j] + g * s.BlockSize(j);
    const float* dout_j = dout + p0 * rep * hd;
    // dP = dO·Vᵀ and dV += Pᵀ·dO.
    Gemm(false, true, rows, e, hd, 1, dout_j, hd, v, w, 0, ds.data(), e);
    Gemm(true, false, e, hd, rows, 1, p, e, dout_j, hd, 1, dv, w);
    // Softmax backward: dS = P ⊙ (dP - rowsum(P ⊙ dP)), and rowsum(P ⊙ dP) = dO·O.
    for (int64_t row = 0; row < rows; ++row) {
      const float* a = dout_j + row * hd;
      const float* b = o + (p0 * rep + row) * hd;
      float delta = 0;
      for (int64_t c = 0; c < hd; ++c) delta += a[c] * b[c];
      const float* pr = p + row * e;
      float* dr = ds.data() + row * e;
      for (int64_t c = 0; c < e; ++c) dr[c] = pr[c] * (dr[c] - delta) * scale;
    }
    // dQ = dS·K (each query row belongs to one block) and dK += dSᵀ·Q.
    Gemm(false, false, rows, hd, e, 1, ds.data(), e, k, hd, 0, dq + p0 * rep * hd, hd);
    Gemm(true, false, e, hd, rows, 1, ds.data(), e, q + p0 * rep * hd, hd, 1, dk, hd);
  }
}

class CausalAttentionFn : public torch::autograd::Function<CausalAttentionFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& qkv_in, const Tensor& cos_in, const Tensor& sin_in,
                        int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block) {
    RECORD_FUNCTION("trainyard::fused_attention_forward", std::vector<c10::IValue>());
    const Tensor qkv = qkv_in.contiguous();
    const Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
    const AttentionShape s{qkv.size(0), qkv.size(1), n_heads, n_kv_heads, head_dim, query_block};
    const auto off = s.Offsets();
    const auto opts = qkv.options();
    Tensor qg = at::empty({s.groups(), s.t * s.rep(), s.hd}, opts);
    Tensor kg = at::empty({s.groups(), s.t, s.hd}, opts);
    Phase("trainyard::attention_rope", [&] {
      RopeGroupMajor(s, qkv.data_ptr<float>(), qg.data_ptr<float>(), kg.data_ptr<float>(), cos.data_ptr<float>(),
                     sin.data_ptr<float>(), /*inverse=*/false);
    });
    Tensor probs = at::empty({off.back()}, opts);
    Tensor og = at::empty({s.groups(), s.t * s.rep(), s.hd}, opts);
    const AttentionBuffers buf{qkv.data_ptr<float>(), qg.data_ptr<float>(), kg.data_ptr<float>(),
                               probs.data_ptr<float>(), og.data_ptr<float>()};
    {
      Tensor scores = at::empty({off.back()}, opts);
      Phase("trainyard::attention_scores", [&] {
        SerialBlasScope serial;
        at::parallel_for(0, s.groups(), 1, [&](int64_t begin, int64_t end) {
          for (int64_t g = begin; g < end; ++g) AttentionScoresGroup(s, off, g, buf, scores.data_ptr<float>());
        });
      });
      // ATen's softmax: vectorised exp, once per block over all groups.
      Phase("trainyard::attention_softmax", [&] {
        for (int64_t j = 0; j < s.blocks(); ++j) {
          const std::vector<int64_t> sizes{s.groups(), s.len(j) * s.rep(), s.keys(j)};
          Tensor pj = probs.narrow(0, off[j], off[j + 1] - off[j]).view(sizes);
          at::_softmax_out(pj, scores.narrow(0, off[j], off[j + 1] - off[j]).view(sizes), -1, false);
        }
      });
      Phase("trainyard::attention_values", [&] {
        SerialBlasScope serial;
        at::parallel_for(0, s.groups(), 1, [&](int64_t begin, int64_t end) {
          for (int64_t g = begin; g < end; ++g) AttentionValuesGroup(s, off, g, buf);
        });
      });
    }
    Tensor out = at::empty({s.b, s.t, s.d()}, opts);
    Phase("trainyard::attention_scatter",
          [&] { CopyHeads(s, out.data_ptr<float>(), og.data_ptr<float>(), /*to_group_major=*/false); });
    ctx->save_for_backward({qkv, qg, kg, probs, og, cos, sin});
    ctx->saved_data["shape"] = std::vector<int64_t>{n_heads, n_kv_heads, head_dim, query_block};
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &qkv = saved[0], &qg = saved[1], &kg = saved[2], &probs = saved[3], &og = saved[4], &cos = saved[5],
                 &sin = saved[6];
    const auto h = ctx->saved_data["shape"].toIntVector();
    const AttentionShape s{qkv.size(0), qkv.size(1), h[0], h[1], h[2], h[3]};
    const auto off = s.Offsets();
    const Tensor dout = grads[0].contiguous();
    Tensor dog = at::empty_like(og);
    Phase("trainyard::attention_bwd_gather",
          [&] { CopyHeads(s, dout.data_ptr<float>(), dog.data_ptr<float>(), /*to_group_major=*/true); });
    Tensor dqkv = at::empty_like(qkv);
    dqkv.narrow(-1, (s.nh + s.nkv) * s.hd, s.nkv * s.hd).zero_();
    Tensor dqg = at::empty_like(qg);
    Tensor dkg = at::zeros_like(kg);
    const AttentionBuffers buf{qkv.data_ptr<float>(), qg.data_ptr<float>(), kg.data_ptr<float>(),
                               probs.data_ptr<float>(), og.data_ptr<float>()};
    const AttentionGrads grad{dog.data_ptr<float>(), dqg.data_ptr<float>(), dkg.data_ptr<float>(),
                              dqkv.data_ptr<float>()};
    Phase("trainyard::attention_bwd_groups", [&] {
      SerialBlasScope serial;
      at::parallel_for(0, s.groups(), 1, [&](int64_t begin, int64_t end) {
        std::vector<float> ds(s.qb * s.rep() * s.t);
        for (int64_t g = begin; g < end; ++g) AttentionBackwardGroup(s, off, g, buf, grad, ds);
      });
    });
    Phase("trainyard::attention_bwd_rope", [&] {
      RopeGroupMajor(s, dqkv.data_ptr<float>(), dqg.data_ptr<float>(), dkg.data_ptr<float>(), cos.data_ptr<float>(),
                     sin.data_ptr<float>(), /*inverse=*/true);
    });
    return {dqkv, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

// ---- RMSNorm -------------------------------------------------------------------
class RmsNormFn : public torch::autograd::Function<RmsNormFn> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x_in, const Tensor& w_in, double eps) {
    RECORD_FUNCTION("trainyard::fused_rms_norm_forward", std::vector<c10::IValue>());
    const Tensor x = x_in.contiguous(), w = w_in.contiguous();
    const int64_t dim = x.size(-1), rows = x.numel() / dim;
    Tensor y = at::empty_like(x);
    Tensor rstd = at::empty({rows}, x.options());
    const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>();
    float *yp = y.data_ptr<float>(), *rp = rstd.data_ptr<float>();
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      loops::RmsNormForward(xp, wp, yp, rp, begin, end, dim, static_cast<float>(eps));
    });
    ctx->save_for_backward({x, w, rstd});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1], &rstd = saved[2];
    const Tensor gy = grads[0].contiguous();
    const int64_t dim = x.size(-1), rows = x.numel() / dim;
    Tensor dx = at::empty_like(x);
    // One weight-gradient row per intra-op thread, summed at the end.
    Tensor dw_parts = at::zeros({at::get_num_threads(), dim}, x.options());
    const float *xp = x.data_ptr<float>(), *wp = w.data_ptr<float>(), *rp = rstd.data_ptr<float>(),
                *gp = gy.data_ptr<float>();
    float *dxp = dx.data_ptr<float>(), *parts = dw_parts.data_ptr<float>();
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      loops::RmsNormBackward(xp, wp, rp, gp, dxp, parts + at::get_thread_num() * dim, begin, end, dim);
    });
    return {dx, dw_parts.sum(0), Tensor()};
  }
};

Tensor CausalAttentionKernel(const Tensor& qkv, const Tensor& cos, const Tensor& sin, int64_t n_heads,
                             int64_t n_kv_heads, int64_t head_dim, int64_t query_block) {
  if (BFloat16AttentionApplies(qkv)) {
    // bf16 activations: the fp32 kernel on the upcast projection, and its output cast
    // back (autograd casts the gradient on the way in and out). LibTorch's bf16 flash
    // kernel took about twice as long on the same shapes (docs/mixed_precision.md), and
    // the scores in fp32 are at least as exact.
    reference::CheckAttentionArgs(qkv, cos, sin, n_heads, n_kv_heads, head_dim, query_block);
    return CausalAttentionFn::apply(qkv.to(torch::kFloat), cos.to(torch::kFloat), sin.to(torch::kFloat), n_heads,
                                    n_kv_heads, head_dim, query_block)
        .to(qkv.scalar_type());
  }
  if (!AttentionApplies(qkv)) {
    return reference::CausalAttention(qkv, cos, sin, n_heads, n_kv_heads, head_dim, query_block);
  }
  reference::CheckAttentionArgs(qkv, cos, sin, n_heads, n_kv_heads, head_dim, query_block);
  return CausalAttentionFn::apply(qkv, cos, sin, n_heads, n_kv_heads, head_dim, query_block);
}

Tensor RmsNormKernel(const Tensor& x, const Tensor& weight, double eps) {
  if (!Applies(x)) return reference::RmsNorm(x, weight, eps);
  reference::CheckRmsNormArgs(x, weight);
  return RmsNormFn::apply(x, weight, eps);
}

}  // namespace

// The CPU kernels of fused_cpu_kernels.cc (schemas and the reference in ../ops.cc).
// Each has one kernel at the AutogradCPU key (the autograd::Function above: forward
// and hand-written backward) and the same kernel under no-grad at the CPU key (reached
// only below autograd, e.g. for inference tensors). Where the fused kernel does not
// apply (bf16, switched off) both hand the call to the reference.
TORCH_LIBRARY_IMPL(trainyard, AutogradCPU, m) {
  m.impl("causal_attention", &CausalAttentionKernel);
  m.impl("rms_norm", &RmsNormKernel);
}

TORCH_LIBRARY_IMPL(trainyard, CPU, m) {
  m.impl("causal_attention", &NoGrad<decltype(CausalAttentionKernel), CausalAttentionKernel>::Call);
  m.impl("rms_norm", &NoGrad<decltype(RmsNormKernel), RmsNormKernel>::Call);
}

void SetEnabled(bool enabled) { g_enabled.store(enabled, std::memory_order_relaxed); }

bool AttentionEnabled() { return Enabled() && g_attention_enabled.load(std::memory_order_relaxed); }

void SetAttentionEnabled(bool enabled) { g_attention_enabled.store(enabled, std::memory_order_relaxed); }

void SetEnabledFromEnvironment() {
  const char* fused = std::getenv("TRAINYARD_FUSED_CPU_KERNELS");
  if (fused != nullptr && std::string(fused) == "0") SetEnabled(false);
  const char* attention = std::getenv("TRAINYARD_FUSED_ATTENTION");
  if (attention != nullptr && std::string(attention) == "0") SetAttentionEnabled(false);
}

bool Enabled() { return g_enabled.load(std::memory_order_relaxed) && cpu_blas::Available(); }

bool Applies(const torch::Tensor& x) { return Enabled() && x.device().is_cpu() && x.scalar_type() == torch::kFloat32; }

bool AttentionApplies(const torch::Tensor& x) { return Applies(x) && AttentionEnabled(); }

bool BFloat16AttentionApplies(const torch::Tensor& x) {
  return AttentionEnabled() && x.device().is_cpu() && x.scalar_type() == torch::kBFloat16;
}

void LinkCpuKernels() { LinkFfnKernels(); }

double SumOfSquares(const torch::Tensor& x_in) {
  TORCH_CHECK(x_in.device().is_cpu() && x_in.scalar_type() == torch::kFloat32,
              "fused sum of squares: needs a float32 CPU tensor");
  const torch::Tensor x = x_in.contiguous();
  const float* p = x.data_ptr<float>();
  // One partial per intra-op thread, summed in thread order: deterministic for a
  // given thread count.
  // Within a chunk, 8 interleaved accumulators (element i adds into lane i % 8, lanes
  // summed in order at the end): independent adds the compiler vectorises, where one
  // accumulator waits on the latency of each add (12.8 → 3.0 ms per debug step,
  // measured with trainyard-step-profile). Still a fixed order, so still deterministic.
  std::vector<double> partial(at::get_num_threads(), 0.0);
  at::parallel_for(0, x.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
    constexpr int kLanes = 8;
    double lane[kLanes] = {};
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(p[i + j]) * p[i + j];
    }
    double acc = 0;
    for (; i < end; ++i) acc += static_cast<double>(p[i]) * p[i];
    for (int j = 0; j < kLanes; ++j) acc += lane[j];
    partial[at::get_thread_num()] += acc;
  });
  double sum = 0;
  for (double v : partial) sum += v;
  return sum;
}

}  // namespace trainyard::engine::fused
