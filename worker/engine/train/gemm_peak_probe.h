// Measures this process's fp32 GEMM peak once at start-up, the denominator of MFU: the
// fastest single multiply over a fixed wall time, on the current threads, across a
// square shape and the two skinny shapes transformer layers run (K small: projections;
// K large: weight gradients). A BLAS kernel can run the skinny shapes faster than the
// square one (OpenBLAS's Prescott kernels here: ~30 GFLOP/s square, more on K=256), and
// a peak below what the model achieves would report MFU > 1. Also reports which BLAS
// kernel is in use. On CPU, half the timed multiplies run as cpu_blas::SplitGemm (the
// fused kernels' way), so the peak is the faster of the two. On a CUDA device the same measurement runs there: fp32
// (TF32 off, DevicePlacement), larger shapes so a multiply outlasts its launch, and a device synchronize before and
// after each timed multiply. Not thread-safe; call from main.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <string>

namespace trainyard::engine {

class GemmPeakProbe {
 public:
  // The fastest FLOP/s of one fp32 [m,k]·[k,n] multiply on `device`, run for about
  // `seconds`.
  static double MeasureShape(int m, int k, int n, double seconds,
                             const c10::Device& device = c10::Device(c10::DeviceType::CPU),
                             c10::ScalarType dtype = c10::ScalarType::Float);
  // The peak on `device`: the best of MeasureShape over a square and two skinny shapes,
  // about `seconds` in all. CPU: 1024³, 2048×256×1024 and 1024×2048×256, each shrunk (its
  // largest side halved) while one multiply would take more than seconds/6 at the rate
  // of a 256³ scout, so a slow kernel keeps the budget; CUDA: 4096³, 16384×1024×4096 and
  // 4096×16384×1024.
  // `dtype` is the job's compute dtype: a bf16 job's MFU is against the bf16 GEMM peak
  // (LibTorch's multiply only; the fused fp32 split does not apply).
  static double MeasureFlops(double seconds = 0.6, const c10::Device& device = c10::Device(c10::DeviceType::CPU),
                             c10::ScalarType dtype = c10::ScalarType::Float);
  // `mkn` with its largest side halved (ties: the first) while one multiply would take
  // more than `max_seconds` at `flops_per_s`, no side below 64: MeasureFlops's CPU shapes.
  static std::array<int, 3> FitShape(std::array<int, 3> mkn, double flops_per_s, double max_seconds);
  // Which kernel runs a bf16 GEMM on `device`, for the start-up line: on CPU from
  // /proc/cpuinfo's flags and whether LibTorch has oneDNN ("oneDNN, AVX512-BF16
  // instructions", "oneDNN, bf16 emulated with AVX-512 (no avx512_bf16)", or ATen's
  // reference loop without AVX-512), on CUDA "cuBLAS".
  static std::string Bf16GemmPath(const c10::Device& device);
  // Caps the BLAS's own thread pool (cpu_blas::SetThreads): OpenBLAS sizes it from
  // the core count, which at::set_num_threads does not touch; ranks sharing a machine
  // must cap it. MKL follows the intra-op threads.
  static void SetBlasThreads(int threads);
  // The BLAS build or kernel in use (cpu_blas::CoreName): MKL's version string,
  // OpenBLAS's core name (e.g. "Haswell"), or "unknown".
  static std::string BlasCoreName();
};

}  // namespace trainyard::engine
