#include "worker/engine/train/gemm_peak_probe.h"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "worker/engine/base/torch_compat.h"
#include "worker/engine/kernels/cpu/cpu_blas.h"

namespace trainyard::engine {

namespace {

// FLOP/s of one [256,256]·[256,256] multiply in `dtype` on the CPU, after one warm-up.
double ScoutRate(c10::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  auto a = torch::ones({256, 256}).to(dtype);
  auto c = torch::empty({256, 256}, a.options());
  torch::mm_out(c, a, a);
  const auto t0 = std::chrono::steady_clock::now();
  torch::mm_out(c, a, a);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * 256 * 256 * 256 / std::max(s, 1e-9);
}

}  // namespace

double GemmPeakProbe::MeasureFlops(double seconds, const c10::Device& device, c10::ScalarType dtype) {
  const int cpu_shapes[][3] = {{1024, 1024, 1024}, {2048, 256, 1024}, {1024, 2048, 256}};
  // A GPU finishes a 1024³ multiply in tens of microseconds, about a launch and a
  // synchronize; these take milliseconds at an H100/H200's fp32 rate.
  const int cuda_shapes[][3] = {{4096, 4096, 4096}, {16384, 1024, 4096}, {4096, 16384, 1024}};
  const auto& shapes = device.is_cuda() ? cuda_shapes : cpu_shapes;
  // On CPU a dtype with only a slow kernel (bf16 where LibTorch has no oneDNN bf16 path,
  // as on a CPU without AVX-512: its reference loop runs ~1 GFLOP/s, two seconds for one
  // 1024³ multiply) would make the probe take tens of seconds, at start-up and at every
  // re-probe. A 256³ scout gives the rate, and a shape's largest side is halved until one
  // multiply takes at most half the shape's share of the time; a fast kernel keeps the
  // shapes above.
  const double rate = device.is_cuda() ? 0 : ScoutRate(dtype);
  double best = 0;
  for (const auto& s : shapes) {
    const std::array<int, 3> d =
        rate > 0 ? FitShape({s[0], s[1], s[2]}, rate, seconds / 6) : std::array<int, 3>{s[0], s[1], s[2]};
    best = std::max(best, MeasureShape(d[0], d[1], d[2], seconds / 3, device, dtype));
  }
  return best;
}

std::array<int, 3> GemmPeakProbe::FitShape(std::array<int, 3> mkn, double flops_per_s, double max_seconds) {
  while (2.0 * mkn[0] * mkn[1] * mkn[2] / flops_per_s > max_seconds) {
    int* largest = std::max_element(mkn.begin(), mkn.end());
    if (*largest <= 64) break;
    *largest /= 2;
  }
  return mkn;
}

double GemmPeakProbe::MeasureShape(int m, int k, int n, double seconds, const c10::Device& device,
                                   c10::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(1);
  // On CUDA the operands are drawn there (the device's default generator): filling
  // 64M host floats would cost more than the measurement.
  auto operand = [&](int rows, int cols) {
    if (!device.is_cuda()) return torch::empty({rows, cols}).uniform_(-1, 1, gen).to(dtype);
    return torch::empty({rows, cols}, torch::TensorOptions().device(device)).uniform_(-1, 1).to(dtype);
  };
  auto a = operand(m, k);
  auto b = operand(k, n);
  auto c = torch::empty({m, n}, a.options());
  // Warm-up: thread pool and page faults on CPU; cuBLAS handle, workspace and kernel
  // choice on CUDA.
  for (int i = 0; i < (device.is_cuda() ? 3 : 1); ++i) torch::mm_out(c, a, b);
  compat::Synchronize(device);
  // The fastest single multiply, not the average: a peak is what the hardware can do,
  // and other processes on a shared machine only ever make a multiply slower. On CUDA
  // the synchronize after the multiply makes the wall time cover the kernel.
  using Clock = std::chrono::steady_clock;
  const double flops = 2.0 * m * k * static_cast<double>(n);
  auto fastest = [&](double budget, const auto& multiply) {
    double best = 0;
    const auto start = Clock::now();
    for (int iters = 0; iters < 5 || std::chrono::duration<double>(Clock::now() - start).count() < budget; ++iters) {
      const auto t0 = Clock::now();
      multiply();
      compat::Synchronize(device);
      best = std::max(best, flops / std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return best;
  };
  auto library = [&] { torch::mm_out(c, a, b); };
  if (device.is_cuda() || !cpu_blas::Available() || dtype != c10::ScalarType::Float) {
    return fastest(seconds, library);
  }
  // On CPU the second half of the time runs the multiply the way the fused kernels run
  // theirs (row slabs, one single-threaded BLAS call per intra-op thread; cpu_blas.h),
  // and the peak is the faster of the two, so the model's GEMMs cannot beat the
  // denominator. Library first: OpenBLAS's threads spin for a while after a call, which
  // would slow the split multiplies of the step that follows a re-probe; within the
  // split half they only delay the first few multiplies.
  const double best = fastest(seconds / 2, library);
  return std::max(best, fastest(seconds / 2, [&] {
                    cpu_blas::SplitGemm(false, false, m, n, k, 1, a.data_ptr<float>(), k, b.data_ptr<float>(), n, 0,
                                        c.data_ptr<float>(), n);
                  }));
}

std::string GemmPeakProbe::Bf16GemmPath(const c10::Device& device) {
  if (device.is_cuda()) return "cuBLAS";
  std::set<std::string> flags;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    for (std::string w; words >> w;) flags.insert(w);
    break;
  }
  const bool onednn = at::globalContext().hasMKLDNN() && at::globalContext().userEnabledMkldnn();
  // LibTorch sends a bf16 matmul to oneDNN when the CPU has AVX-512 BW, VL and DQ
  // (mkldnn_bf16_device_check); oneDNN then uses AVX512-BF16 instructions if present.
  const bool avx512 = flags.count("avx512bw") && flags.count("avx512vl") && flags.count("avx512dq");
  if (onednn && avx512) {
    return flags.count("avx512_bf16") ? "oneDNN, AVX512-BF16 instructions"
                                      : "oneDNN, bf16 emulated with AVX-512 (no avx512_bf16)";
  }
  return onednn ? "ATen's reference bf16 loop (no AVX-512 BW/VL/DQ for oneDNN's bf16)"
                : "ATen's reference bf16 loop (LibTorch built without oneDNN)";
}

void GemmPeakProbe::SetBlasThreads(int threads) { cpu_blas::SetThreads(threads); }

std::string GemmPeakProbe::BlasCoreName() { return cpu_blas::CoreName(); }

}  // namespace trainyard::engine
