// The per-row inner loops of the fused RMSNorm, SwiGLU and MoE combine kernels, over a range of rows
// (the callers split rows over the intra-op threads). Torch-free and compiled on their
// own with -O3 -fno-math-errno (see CMakeLists.txt): GCC's -O2 vectoriser (the "very
// cheap" cost model) leaves loops with a run-time trip count scalar, and a single float
// accumulator cannot be vectorised without reordering, so the row sums use 8 interleaved
// lanes (element c adds into lane c % 8; lanes summed in order): a fixed order, so the
// results are deterministic.
#pragma once

#include <cstdint>

namespace trainyard::engine::fused::loops {

// y = x·r·w per row, r = 1/sqrt(mean(x²) + eps) stored in rstd[row].
void RmsNormForward(const float* x, const float* w, float* y, float* rstd, int64_t row_begin, int64_t row_end,
                    int64_t dim, float eps);

// dx per row, and dw += Σ_rows gy·x·r (dw: one row of `dim`, owned by the caller's thread).
void RmsNormBackward(const float* x, const float* w, const float* rstd, const float* gy, float* dx, float* dw,
                     int64_t row_begin, int64_t row_end, int64_t dim);

// h: rows of [a | b] (2·hidden), sig = σ(a) per row of `hidden`: out = a·sig·b.
void SwiGluForward(const float* h, const float* sig, float* out, int64_t row_begin, int64_t row_end,
                   int64_t hidden);

// dh = [g·b·σ(a)·(1 + a·(1 − σ(a))) | g·a·σ(a)] per row.
void SwiGluBackward(const float* h, const float* sig, const float* g, float* dh, int64_t row_begin, int64_t row_end,
                    int64_t hidden);

// out[t] = Σ gates[r]·y[r] over r = rows[start[t] .. start[t + 1]), in that order.
void CombineForward(const float* y, const float* gates, const int64_t* start, const int64_t* rows, float* out,
                    int64_t token_begin, int64_t token_end, int64_t dim);

// dy[r] = dout[ids[r]]·gates[r] and dgates[r] = Σ dout[ids[r]]·y[r], per row r.
void CombineBackward(const float* y, const float* gates, const int64_t* ids, const float* dout, float* dy,
                     float* dgates, int64_t row_begin, int64_t row_end, int64_t dim);

}  // namespace trainyard::engine::fused::loops
