#include "worker/engine/kernels/cpu/row_loops.h"

#include <cmath>

namespace trainyard::engine::fused::loops {
namespace {

constexpr int kLanes = 8;

// Σ a[c]·b[c] over c < n in 8 interleaved lanes, then the tail, lanes added in order.
inline float Dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float lane[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] += a[c + j] * b[c + j];
  }
  float sum = 0;
  for (; c < n; ++c) sum += a[c] * b[c];
  for (int j = 0; j < kLanes; ++j) sum += lane[j];
  return sum;
}

// Σ a[c]·b[c]·w[c].
inline float Dot3(const float* __restrict a, const float* __restrict b, const float* __restrict w, int64_t n) {
  float lane[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] += a[c + j] * w[c + j] * b[c + j];
  }
  float sum = 0;
  for (; c < n; ++c) sum += a[c] * w[c] * b[c];
  for (int j = 0; j < kLanes; ++j) sum += lane[j];
  return sum;
}

}  // namespace

void RmsNormForward(const float* x, const float* w, float* y, float* rstd, int64_t row_begin, int64_t row_end,
                    int64_t dim, float eps) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const float* __restrict xr = x + row * dim;
    float* __restrict yr = y + row * dim;
    const float r = 1.0f / std::sqrt(Dot(xr, xr, dim) / static_cast<float>(dim) + eps);
    rstd[row] = r;
    for (int64_t c = 0; c < dim; ++c) yr[c] = xr[c] * r * w[c];
  }
}

void RmsNormBackward(const float* x, const float* w, const float* rstd, const float* gy, float* dx, float* dw,
                     int64_t row_begin, int64_t row_end, int64_t dim) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const float* __restrict xr = x + row * dim;
    const float* __restrict gr = gy + row * dim;
    float* __restrict dr = dx + row * dim;
    float* __restrict dwr = dw;
    const float r = rstd[row];
    // d/dx of x·r·w: r·(g·w) − x·r³·mean(g·w·x).
    const float k = r * r * r * Dot3(gr, xr, w, dim) / static_cast<float>(dim);
    for (int64_t c = 0; c < dim; ++c) {
      dr[c] = r * gr[c] * w[c] - xr[c] * k;
      dwr[c] += gr[c] * xr[c] * r;
    }
  }
}

void SwiGluForward(const float* h, const float* sig, float* out, int64_t row_begin, int64_t row_end,
                   int64_t hidden) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const float* __restrict a = h + row * 2 * hidden;
    const float* __restrict b = a + hidden;
    const float* __restrict s = sig + row * hidden;
    float* __restrict o = out + row * hidden;
    for (int64_t c = 0; c < hidden; ++c) o[c] = a[c] * s[c] * b[c];
  }
}

void SwiGluBackward(const float* h, const float* sig, const float* g, float* dh, int64_t row_begin, int64_t row_end,
                    int64_t hidden) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const float* __restrict a = h + row * 2 * hidden;
    const float* __restrict b = a + hidden;
    const float* __restrict s = sig + row * hidden;
    const float* __restrict gr = g + row * hidden;
    float* __restrict da = dh + row * 2 * hidden;
    float* __restrict db = da + hidden;
    for (int64_t c = 0; c < hidden; ++c) {
      // silu(a) = a·σ(a); silu'(a) = σ(a)·(1 + a·(1 − σ(a))).
      da[c] = gr[c] * b[c] * s[c] * (1.0f + a[c] * (1.0f - s[c]));
      db[c] = gr[c] * (a[c] * s[c]);
    }
  }
}

void CombineForward(const float* y, const float* gates, const int64_t* start, const int64_t* rows, float* out,
                    int64_t token_begin, int64_t token_end, int64_t dim) {
  for (int64_t t = token_begin; t < token_end; ++t) {
    float* __restrict o = out + t * dim;
    for (int64_t d = 0; d < dim; ++d) o[d] = 0.0f;
    for (int64_t j = start[t]; j < start[t + 1]; ++j) {
      const int64_t r = rows[j];
      const float gate = gates[r];
      const float* __restrict yr = y + r * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] += yr[d] * gate;
    }
  }
}

void CombineBackward(const float* y, const float* gates, const int64_t* ids, const float* dout, float* dy,
                     float* dgates, int64_t row_begin, int64_t row_end, int64_t dim) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* __restrict d = dout + ids[r] * dim;
    const float* __restrict yr = y + r * dim;
    float* __restrict dyr = dy + r * dim;
    const float gate = gates[r];
    for (int64_t c = 0; c < dim; ++c) dyr[c] = d[c] * gate;
    dgates[r] = Dot(d, yr, dim);
  }
}

}  // namespace trainyard::engine::fused::loops
