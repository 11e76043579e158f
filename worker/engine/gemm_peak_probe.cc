#include "worker/engine/gemm_peak_probe.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>

#include <torch/torch.h>

// Weak, so the engine links whether or not OpenBLAS provides it.
extern "C" char* openblas_get_corename() __attribute__((weak));
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace trainyard::engine {

double GemmPeakProbe::MeasureFlops(double seconds) {
  const int shapes[][3] = {{1024, 1024, 1024}, {2048, 256, 1024}, {1024, 2048, 256}};
  double best = 0;
  for (const auto& s : shapes) best = std::max(best, MeasureShape(s[0], s[1], s[2], seconds / 3));
  return best;
}

double GemmPeakProbe::MeasureShape(int m, int k, int n, double seconds) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(1);
  auto a = torch::empty({m, k}).uniform_(-1, 1, gen);
  auto b = torch::empty({k, n}).uniform_(-1, 1, gen);
  auto c = torch::empty({m, n});
  torch::mm_out(c, a, b);  // warm-up: thread pool, page faults
  // The fastest single multiply, not the average: a peak is what the hardware can do,
  // and other processes on a shared machine only ever make a multiply slower.
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double best = 0;
  int iters = 0;
  while (iters < 5 || std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    const auto t0 = Clock::now();
    torch::mm_out(c, a, b);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, 2.0 * m * k * static_cast<double>(n) / dt);
    ++iters;
  }
  return best;
}

void GemmPeakProbe::SetBlasThreads(int threads) {
  using Fn = void (*)(int);
  Fn fn = &openblas_set_num_threads;
  if (fn == nullptr) fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (fn != nullptr) fn(threads);
}

std::string GemmPeakProbe::BlasCoreName() {
  using Fn = char* (*)();
  Fn fn = &openblas_get_corename;
  // The executable may not see OpenBLAS at link time when torch loads it indirectly.
  if (fn == nullptr) fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (fn == nullptr) return "unknown";
  const char* name = fn();
  return name != nullptr ? std::string(name) : "unknown";
}

}  // namespace trainyard::engine
