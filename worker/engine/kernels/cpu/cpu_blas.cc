#include "worker/engine/kernels/cpu/cpu_blas.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#ifndef _OPENMP
#error "cpu_blas.cc must be compiled with OpenMP: at::parallel_for is serial without it"
#endif

namespace trainyard::engine::cpu_blas {
namespace {

// The reference BLAS's Fortran interface (column-major, every argument by pointer),
// which MKL and OpenBLAS both export.
using SgemmFn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                         const int*, const float*, const int*, const float*, float*, const int*);

struct Blas {
  SgemmFn sgemm = nullptr;
  std::string name = "none";
  std::string core = "unknown";
  void (*openblas_set_threads)(int) = nullptr;
  int (*openblas_get_threads)() = nullptr;
};

const Blas& GetBlas() {
  static const Blas blas = [] {
    Blas b;
    b.sgemm = reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "sgemm_"));
    if (b.sgemm == nullptr) return b;
    if (auto version = reinterpret_cast<void (*)(char*, int)>(dlsym(RTLD_DEFAULT, "MKL_Get_Version_String"))) {
      char buf[256] = {};
      version(buf, sizeof(buf) - 1);
      b.core = buf;
      // "Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build ..." -> "2024.2"
      std::string v = b.core;
      const auto at = v.find("Version ");
      v = at == std::string::npos ? "" : v.substr(at + 8, v.find_first_of("- ", at + 8) - at - 8);
      b.name = "MKL " + (v.empty() ? std::string() : v + " ") + "sgemm_";
    } else {
      b.openblas_set_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
      b.openblas_get_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
      auto corename = reinterpret_cast<char* (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
      const char* core = corename != nullptr ? corename() : nullptr;
      if (core != nullptr) b.core = core;
      b.name = corename != nullptr ? "OpenBLAS sgemm_" : "sgemm_";
    }
    return b;
  }();
  return blas;
}

}  // namespace

bool Available() { return GetBlas().sgemm != nullptr; }

const std::string& GemmName() { return GetBlas().name; }

std::string CoreName() { return GetBlas().core; }

void SetThreads(int threads) {
  if (GetBlas().openblas_set_threads != nullptr) GetBlas().openblas_set_threads(threads);
}

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  TORCH_CHECK(Available(), "cpu_blas: no sgemm_ in this process");
  if (m == 0 || n == 0) return;
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands and
  // their roles, keep each one's transpose flag.
  const char ta = trans_b ? 'T' : 'N', tb = trans_a ? 'T' : 'N';
  const int mm = static_cast<int>(n), nn = static_cast<int>(m), kk = static_cast<int>(k);
  const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
  GetBlas().sgemm(&ta, &tb, &mm, &nn, &kk, &alpha, b, &la, a, &lb, &beta, c, &lc);
}

void SplitGemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  constexpr int64_t kTile = 16;
  const int64_t threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  const int64_t slab = (m + threads - 1) / threads;
  const int64_t rows = (slab + kTile - 1) / kTile * kTile;
  if (threads <= 1 || m < 2 * kTile) {
    Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  SerialScope serial;
  at::parallel_for(0, (m + rows - 1) / rows, 1, [&](int64_t first, int64_t last) {
    for (int64_t s = first; s < last; ++s) {
      const int64_t r0 = s * rows, len = std::min(rows, m - r0);
      // Rows r0.. of op(A): rows of A, or columns of A when it is transposed.
      const float* a_rows = trans_a ? a + r0 : a + r0 * lda;
      Gemm(trans_a, trans_b, len, n, k, alpha, a_rows, lda, b, ldb, beta, c + r0 * ldc, ldc);
    }
  });
}

// MKL needs nothing: called inside an OpenMP parallel region (the intra-op loops) it
// runs on its caller's thread by itself, and outside one it uses the intra-op threads.
SerialScope::SerialScope() {
  const Blas& blas = GetBlas();
  if (blas.openblas_set_threads != nullptr && blas.openblas_get_threads != nullptr) {
    saved_ = blas.openblas_get_threads();
    if (saved_ > 1) blas.openblas_set_threads(1);
  }
}

SerialScope::~SerialScope() {
  if (saved_ > 1) GetBlas().openblas_set_threads(saved_);
}

}  // namespace trainyard::engine::cpu_blas
