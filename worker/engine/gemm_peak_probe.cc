#include "worker/engine/gemm_peak_probe.h"

#include <dlfcn.h>

#include <chrono>

#include <torch/torch.h>

// Weak, so the engine links whether or not OpenBLAS provides it.
extern "C" char* openblas_get_corename() __attribute__((weak));

namespace trainyard::engine {

double GemmPeakProbe::MeasureFlops(int n, double seconds) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(1);
  auto a = torch::empty({n, n}).uniform_(-1, 1, gen);
  auto b = torch::empty({n, n}).uniform_(-1, 1, gen);
  auto c = torch::empty({n, n});
  torch::mm_out(c, a, b);  // warm-up: thread pool, page faults
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  int iters = 0;
  double elapsed = 0;
  do {
    torch::mm_out(c, a, b);
    ++iters;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return 2.0 * n * n * static_cast<double>(n) * iters / elapsed;
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
