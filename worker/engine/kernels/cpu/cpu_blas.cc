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

enum : int { kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112 };
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                         int);

// oneDNN's row-major sgemm (dnnl.h): status 0 on success.
using DnnlSgemmFn = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                            int64_t, float, float*, int64_t);
struct DnnlVersion {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};

struct Blas {
  SgemmFn sgemm = nullptr;
  DnnlSgemmFn dnnl_sgemm = nullptr;  // used instead of sgemm when present (see cpu_blas.h)
  std::string name;
  void (*set_threads)(int) = nullptr;  // OpenBLAS only
  int (*get_threads)() = nullptr;
};

const Blas& GetBlas() {
  static const Blas blas = [] {
    Blas b;
    b.sgemm = reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
    b.set_threads = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    b.get_threads = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    const char* choice = std::getenv("TRAINYARD_CPU_GEMM");
    const bool cblas_only = choice != nullptr && std::string(choice) == "cblas";
    b.dnnl_sgemm = cblas_only ? nullptr : reinterpret_cast<DnnlSgemmFn>(dlsym(RTLD_DEFAULT, "dnnl_sgemm"));
    if (b.dnnl_sgemm != nullptr) {
      const auto version = reinterpret_cast<const DnnlVersion* (*)()>(dlsym(RTLD_DEFAULT, "dnnl_version"));
      const DnnlVersion* v = version != nullptr ? version() : nullptr;
      b.name = v != nullptr ? "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                                  std::to_string(v->patch) + " dnnl_sgemm"
                            : "oneDNN dnnl_sgemm";
    } else if (b.sgemm != nullptr) {
      b.name = "cblas_sgemm";
    } else {
      b.name = "none";
    }
    return b;
  }();
  return blas;
}

}  // namespace

bool Available() { return GetBlas().sgemm != nullptr || GetBlas().dnnl_sgemm != nullptr; }

const std::string& GemmName() { return GetBlas().name; }

void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  TORCH_CHECK(Available(), "cpu_blas: no cblas_sgemm or dnnl_sgemm in this process");
  if (m == 0 || n == 0) return;
  const Blas& blas = GetBlas();
  if (blas.dnnl_sgemm != nullptr) {
    const int status = blas.dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                                       beta, c, ldc);
    TORCH_CHECK(status == 0, "cpu_blas: dnnl_sgemm failed with status ", status, " for ", m, "x", n, "x", k);
    return;
  }
  blas.sgemm(kCblasRowMajor, trans_a ? kCblasTrans : kCblasNoTrans, trans_b ? kCblasTrans : kCblasNoTrans,
                  static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
                  static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
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

SerialScope::SerialScope() {
  const Blas& blas = GetBlas();
  if (blas.set_threads != nullptr && blas.get_threads != nullptr) {
    saved_ = blas.get_threads();
    if (saved_ > 1) blas.set_threads(1);
  }
}

SerialScope::~SerialScope() {
  if (saved_ > 1) GetBlas().set_threads(saved_);
}

}  // namespace trainyard::engine::cpu_blas
