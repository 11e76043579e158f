// The process's CBLAS sgemm, for the fused CPU kernels and the GEMM peak probe.
//
// LibTorch already loads the system BLAS (OpenBLAS on Debian), so the engine looks
// sgemm up at run time (dlsym) and takes no link-time BLAS dependency; a LibTorch with
// a private BLAS simply runs the composite regions.
//
// SplitGemm exists because OpenBLAS 0.3.21 divides the transformer's skinny multiplies
// (2048 token rows × 256-wide weights) between its threads poorly: on the 2-core dev
// machine (Haswell kernels) a 2048×256×256 multiply ran at 120–150 GFLOP/s on
// OpenBLAS's two threads and at ~163 GFLOP/s as two single-threaded halves, which is
// the two cores' AVX2 peak. Measured with a scratch harness; the GEMM peak probe
// (gemm_peak_probe.cc) times both ways, so the MFU denominator covers this path too.
#pragma once

#include <cstdint>

namespace trainyard::engine::cpu_blas {

// True when the process has a cblas_sgemm.
bool Available();

// Row-major C = alpha·op(A)·op(B) + beta·C, one BLAS call on BLAS's own threads.
// op(A) is m×k, op(B) is k×n; lda/ldb/ldc are the row strides of A, B, C as stored.
void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same product with C's rows split into one contiguous slab per intra-op thread
// (at::parallel_for), each a single-threaded BLAS call. Rows are cut at multiples of
// 16, so every thread's kernel runs whole register tiles. Same result as Gemm up to
// the BLAS kernel's summation order, which does not depend on the split.
void SplitGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// For as long as it lives, BLAS calls run on their caller's thread only: for code that
// calls Gemm from every intra-op thread, where OpenBLAS's own pool would oversubscribe
// the cores. A no-op with a BLAS whose threads cannot be set.
class SerialScope {
 public:
  SerialScope();
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  int saved_ = 0;
};

}  // namespace trainyard::engine::cpu_blas
