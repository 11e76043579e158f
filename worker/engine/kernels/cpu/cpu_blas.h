// The process's sgemm, for the fused CPU kernels and the GEMM peak probe.
//
// LibTorch already loads the system BLAS (OpenBLAS on Debian) and oneDNN (Debian's
// libdnnl2, a dependency of libtorch), so the engine looks sgemm up at run time (dlsym)
// and takes no link-time dependency; a LibTorch with neither exported simply runs the
// composite regions. oneDNN's dnnl_sgemm is used when the process has it
// (TRAINYARD_CPU_GEMM=cblas forces cblas_sgemm, for A/B figures): on the 2-core dev
// machine (AVX-512) it ran the step's shapes as two single-threaded row slabs at
// 155–220 GFLOP/s where OpenBLAS 0.3.21's SkylakeX kernels ran them at 124–197
// (best of 30, 2048-row projections, their gradients and 512-row expert GEMMs).
//
// SplitGemm exists because OpenBLAS 0.3.21 divides the transformer's skinny multiplies
// (2048 token rows × 256-wide weights) between its threads poorly: on the 2-core dev
// machine (Haswell kernels) a 2048×256×256 multiply ran at 120–150 GFLOP/s on
// OpenBLAS's two threads and at ~163 GFLOP/s as two single-threaded halves, which is
// the two cores' AVX2 peak. Measured with a scratch harness; the GEMM peak probe
// (gemm_peak_probe.cc) times both ways, so the MFU denominator covers this path too.
#pragma once

#include <cstdint>
#include <string>

namespace trainyard::engine::cpu_blas {

// True when the process has a dnnl_sgemm or a cblas_sgemm.
bool Available();

// Which sgemm Gemm calls: "oneDNN 2.6.3 dnnl_sgemm", "cblas_sgemm" or "none".
const std::string& GemmName();

// Row-major C = alpha·op(A)·op(B) + beta·C, one BLAS call on BLAS's own threads
// (oneDNN's: the OpenMP threads, one inside a parallel region).
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
