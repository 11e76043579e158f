// Measures this process's fp32 GEMM throughput once at start-up (the fastest of
// repeated square matmuls over a fixed wall time, on the current threads), the
// denominator of MFU. Also reports which BLAS kernel is in use. Not thread-safe; call from main.
#pragma once

#include <string>

namespace trainyard::engine {

class GemmPeakProbe {
 public:
  // Returns achieved FLOP/s of an n³ matmul, run for about `seconds`.
  static double MeasureFlops(int n = 1024, double seconds = 0.5);
  // OpenBLAS keeps its own thread pool, sized from the core count, which
  // at::set_num_threads does not touch; ranks sharing a machine must cap it.
  static void SetBlasThreads(int threads);
  // OpenBLAS core name (e.g. "Haswell") or "unknown" when not linked to OpenBLAS.
  static std::string BlasCoreName();
};

}  // namespace trainyard::engine
