// The process's sgemm, for the fused CPU kernels and the GEMM peak probe.
//
// LibTorch already carries a BLAS: the PyPI wheel for x86-64 links Intel MKL into
// libtorch_cpu.so and exports its Fortran `sgemm_` (and MKL's thread controls); a
// LibTorch built on OpenBLAS exports OpenBLAS's `sgemm_`. The engine looks `sgemm_` up
// at run time (dlsym), so it takes no link-time dependency and knows which library
// answered; a LibTorch with none simply runs the composite regions.
//
// SplitGemm exists because a BLAS divides the transformer's skinny multiplies (2048
// token rows × 256-wide weights) between its threads poorly: on the 2-core dev machine
// OpenBLAS 0.3.21 ran a 2048×256×256 multiply at 120–150 GFLOP/s on its two threads and
// at ~163 GFLOP/s as two single-threaded halves. The GEMM peak probe
// (gemm_peak_probe.cc) times both ways, so the MFU denominator covers this path too.
#pragma once

#include <cstdint>
#include <string>

namespace trainyard::engine::cpu_blas {

// True when the process has an sgemm_.
bool Available();

// Which sgemm Gemm calls, for start-up lines and benchmarks: "MKL 2024.2 sgemm_",
// "OpenBLAS sgemm_" or "none".
const std::string& GemmName();

// The BLAS build and kernel in use: MKL's version string, OpenBLAS's core name
// ("Haswell"), or "unknown".
std::string CoreName();

// Caps the BLAS's own thread pool for calls made outside the intra-op loops (OpenBLAS
// sizes it from the core count, which at::set_num_threads does not touch; MKL follows
// the OpenMP threads, so this is a no-op there).
void SetThreads(int threads);

// Row-major C = alpha·op(A)·op(B) + beta·C, one BLAS call on BLAS's own threads (one
// inside a parallel region). op(A) is m×k, op(B) is k×n; lda/ldb/ldc are the row
// strides of A, B, C as stored.
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
// the cores. A no-op with MKL (sequential inside a parallel region by itself) and with
// a BLAS whose threads cannot be set.
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
