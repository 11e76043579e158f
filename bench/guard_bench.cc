// Cost of the compile layer on CPU, as numbers (this program asserts nothing):
//   BM_GuardLookup/*   the guard check per region call with 8 cached entries for a
//                      3-input, 4-param region (2-3 dims each): hit on the last entry,
//                      and a full miss. "sizes" entries differ in input[0].size(0) (a
//                      sequence length: each check stops at the first tensor); "last"
//                      entries differ only in the last param (each check reads every
//                      guard: the worst case).
//   BM_RegionCall/*    one call of a trivial region: fn directly, and through a jit
//                      entry with each executor (the interpreter's fixed overhead).
//   BM_FfnStep/*       forward + backward of an RMSNorm+SwiGLU region (tokens x 256,
//                      hidden 1024): eager vs jit SIMPLE vs jit PROFILING, the figure
//                      that picks SIMPLE as the CPU default.
// Run: build-main/bin/trainyard-guard-bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "worker/engine/compile/compile_context.h"
#include "worker/engine/compile/compiled_region.h"

namespace {

using trainyard::engine::compile::CompileBackend;
using trainyard::engine::compile::CompileContext;
using trainyard::engine::compile::CompiledRegion;

using trainyard::engine::compile::CompileEventSink;
using trainyard::engine::compile::CompileOptions;
using trainyard::engine::compile::JitExecutorMode;
using trainyard::engine::compile::RegionCache;
using trainyard::engine::compile::RegionKey;
using Tensors = std::vector<torch::Tensor>;

class NullSink : public CompileEventSink {
 public:
  void OnCompileEvent(const trainyard::v1::CompileEvent&) override {}
};

struct Signature {
  Tensors inputs, params;
};

// x [t, 256], rope [t, 32], bias [256]; norm [256], w1 [512, 256], w2 [256, 512],
// w3 [512, 256]. `vary_last` puts the variation in w3's rows instead of t.
Signature MakeSignature(int64_t variant, bool vary_last) {
  const int64_t t = vary_last ? 128 : 128 + variant;
  const int64_t w3_rows = vary_last ? 512 + variant : 512;
  return {{torch::zeros({t, 256}).requires_grad_(), torch::zeros({t, 32}), torch::zeros({256})},
          {torch::zeros({256}).requires_grad_(), torch::zeros({512, 256}).requires_grad_(),
           torch::zeros({256, 512}).requires_grad_(), torch::zeros({w3_rows, 256}).requires_grad_()}};
}

void BM_GuardLookup(benchmark::State& state, bool vary_last, bool hit) {
  NullSink sink;
  CompileContext ctx(CompileOptions{}, sink);
  const RegionKey key("bench", {{"dim", 256}});
  CompiledRegion region(ctx, key, [](const Tensors& in, const Tensors& p) { return Tensors{in[0] * p[0]}; }, 0,
                        nullptr);
  for (int64_t v = 0; v < 8; ++v) {
    const Signature s = MakeSignature(v, vary_last);
    region(s.inputs, s.params);
  }
  const RegionCache& cache = ctx.CacheFor(key);
  if (cache.size() != 8) state.SkipWithError("expected 8 entries");
  const Signature probe = MakeSignature(hit ? 7 : 8, vary_last);
  for (auto _ : state) {
    // What CompiledRegion does per call before running anything.
    const bool grad_mode = c10::GradMode::is_enabled();
    benchmark::DoNotOptimize(cache.Find(probe.inputs, probe.params, grad_mode));
  }
  if ((cache.Find(probe.inputs, probe.params, true) != nullptr) != hit) state.SkipWithError("wrong outcome");
}
BENCHMARK_CAPTURE(BM_GuardLookup, sizes_hit_last, false, true);
BENCHMARK_CAPTURE(BM_GuardLookup, sizes_miss_all, false, false);
BENCHMARK_CAPTURE(BM_GuardLookup, last_hit_last, true, true);
BENCHMARK_CAPTURE(BM_GuardLookup, last_miss_all, true, false);

CompileOptions Options(CompileBackend backend, JitExecutorMode mode) {
  CompileOptions o;
  o.backend = backend;
  o.jit_executor = mode;
  return o;
}

void BM_RegionCall(benchmark::State& state, CompileBackend backend, JitExecutorMode mode) {
  NullSink sink;
  CompileContext ctx(Options(backend, mode), sink);
  CompiledRegion region(ctx, RegionKey("add", {}), [](const Tensors& in, const Tensors&) { return Tensors{in[0] + 1}; },
                        0, nullptr);
  const Tensors inputs{torch::zeros({4})};
  for (int i = 0; i < 3; ++i) region(inputs, {});  // compile, profile, optimise
  for (auto _ : state) benchmark::DoNotOptimize(region(inputs, {}));
}
BENCHMARK_CAPTURE(BM_RegionCall, eager, CompileBackend::kEager, JitExecutorMode::kAuto);
BENCHMARK_CAPTURE(BM_RegionCall, jit_simple, CompileBackend::kJit, JitExecutorMode::kSimple);
BENCHMARK_CAPTURE(BM_RegionCall, jit_profiling, CompileBackend::kJit, JitExecutorMode::kProfiling);

Tensors RmsSwiGlu(const Tensors& in, const Tensors& p) {
  const auto& x = in[0];
  auto h = x * torch::rsqrt(x.pow(2).mean({-1}, true) + 1e-6) * p[0];
  return {x + torch::matmul(torch::silu(torch::matmul(h, p[1].t())) * torch::matmul(h, p[3].t()), p[2].t())};
}

void BM_FfnStep(benchmark::State& state, CompileBackend backend, JitExecutorMode mode) {
  NullSink sink;
  CompileContext ctx(Options(backend, mode), sink);
  CompiledRegion region(ctx, RegionKey("ffn", {{"dim", 256}, {"hidden", 1024}}), RmsSwiGlu, 0, nullptr);
  torch::manual_seed(0);
  const int64_t tokens = state.range(0);
  const Tensors params{torch::ones({256}).requires_grad_(), (0.05 * torch::randn({1024, 256})).requires_grad_(),
                       (0.05 * torch::randn({256, 1024})).requires_grad_(),
                       (0.05 * torch::randn({1024, 256})).requires_grad_()};
  const Tensors inputs{torch::randn({tokens, 256}).requires_grad_()};
  auto step = [&] {
    region(inputs, params)[0].sum().backward();
    for (const auto& p : params) p.mutable_grad().reset();
    inputs[0].mutable_grad().reset();
  };
  for (int i = 0; i < 4; ++i) step();  // past PROFILING's profiling and optimisation runs
  for (auto _ : state) step();
  state.SetItemsProcessed(state.iterations() * tokens);
}
BENCHMARK_CAPTURE(BM_FfnStep, eager, CompileBackend::kEager, JitExecutorMode::kAuto)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_FfnStep, jit_simple, CompileBackend::kJit, JitExecutorMode::kSimple)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_FfnStep, jit_profiling, CompileBackend::kJit, JitExecutorMode::kProfiling)->Arg(256)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  // One thread: the figures are per-call overheads, not GEMM throughput, and the
  // build machines are shared.
  torch::set_num_threads(1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
