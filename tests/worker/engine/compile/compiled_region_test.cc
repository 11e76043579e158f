#include "worker/engine/compile/compiled_region.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "common/spec/rules.h"
#include "tests/worker/engine/compile/recording_sink.h"
#include "tests/worker/engine/compile/region_test_util.h"
#include "worker/engine/compile/backend/graph_capture.h"
#include "worker/engine/compile/compile_context.h"

namespace trainyard::engine::compile {
namespace {

using namespace testing;  // NOLINT: test helpers
using Kind = v1::CompileEvent;

CompileOptions Options(CompileBackend backend, JitExecutorMode mode = JitExecutorMode::kAuto) {
  CompileOptions o;
  o.backend = backend;
  o.jit_executor = mode;
  return o;
}

// Forward exact, gradients within `rel` of the eager reference.
void ExpectSameAsEager(const FwdBwd& got, const FwdBwd& want, double rel, const std::string& what) {
  ASSERT_EQ(got.outputs.size(), want.outputs.size()) << what;
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    EXPECT_TRUE(torch::equal(got.outputs[i], want.outputs[i])) << what << " output " << i;
  }
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].defined(), want.grads[i].defined()) << what << " grad " << i;
    if (want.grads[i].defined()) {
      EXPECT_LE(MaxRelErr(got.grads[i], want.grads[i]), rel) << what << " grad " << i;
    }
  }
}

TwoArgFn Call(CompiledRegion& r) {
  return [&r](const Tensors& in, const Tensors& p) { return r(in, p); };
}

// x * rsqrt(mean(x^2) + eps) * w: one input, one param.
Tensors Norm(const Tensors& in, const Tensors& p) {
  return {in[0] * torch::rsqrt(in[0].pow(2).mean({-1}, true) + 1e-6) * p[0]};
}

TEST(CompiledRegionTest, IdenticalLayersShareOneCompile) {
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kJit), sink);
  const RegionKey key("ffn", {{"dim", 16}, {"hidden", 32}});
  std::vector<std::unique_ptr<CompiledRegion>> layers;
  std::vector<Tensors> weights;
  for (int i = 0; i < 4; ++i) {
    layers.push_back(std::make_unique<CompiledRegion>(ctx, key, RmsSwiGlu, i, nullptr));
    weights.push_back(RmsSwiGluParams(16, 32, /*seed=*/100 + i));
  }
  const torch::Tensor x = torch::randn({6, 16});
  for (int i = 0; i < 4; ++i) {
    // Each layer's own weights: params are graph inputs, not layer 0's constants.
    const Tensors out = (*layers[i])({x}, weights[i]);
    EXPECT_TRUE(torch::equal(out[0], RmsSwiGlu({x}, weights[i])[0])) << "layer " << i;
  }
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].kind(), Kind::COMPILE);
  EXPECT_EQ(sink.events[0].region(), "ffn{dim=16,hidden=32}");
  EXPECT_EQ(Layers(sink.events[0]), std::vector<int32_t>{0});
  EXPECT_EQ(sink.events[0].cache_entries(), 1);
  const RegionCache* cache = ctx.FindCache(key);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->stats().hits, 3);
  EXPECT_EQ(cache->stats().misses, 1);
  EXPECT_EQ(cache->layers(), (std::vector<int32_t>{0, 1, 2, 3}));

  CompiledRegion wider(ctx, RegionKey("ffn", {{"dim", 16}, {"hidden", 64}}), RmsSwiGlu, 0, nullptr);
  wider({x}, RmsSwiGluParams(16, 64, 7));
  EXPECT_EQ(sink.Count(Kind::COMPILE), 2u);
  EXPECT_EQ(sink.events.size(), 2u);
  EXPECT_EQ(sink.events[1].region(), "ffn{dim=16,hidden=64}");
}

TEST(CompiledRegionTest, RecompilesUpToTheLimitThenRunsEager) {
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kJit), sink);
  CompiledRegion region(ctx, RegionKey("norm", {{"dim", 16}}), Norm, 3, nullptr);
  torch::manual_seed(1);
  const Tensors params{torch::randn({16}).requires_grad_()};
  for (int64_t n = 4; n < 14; ++n) {
    const Tensors inputs{torch::randn({n, 16}).requires_grad_()};
    const FwdBwd got = RunFwdBwd(Call(region), inputs, params);
    const FwdBwd want = RunFwdBwd(Norm, Fresh(inputs), Fresh(params));
    ExpectSameAsEager(got, want, 1e-5, "n=" + std::to_string(n));
  }
  ASSERT_EQ(sink.events.size(), 9u);
  EXPECT_EQ(sink.events[0].kind(), Kind::COMPILE);
  for (int i = 1; i <= 7; ++i) {
    const int64_t n = 4 + i;
    EXPECT_EQ(sink.events[i].kind(), Kind::RECOMPILE);
    // The closest entry is the last one compiled (all are one guard away).
    EXPECT_EQ(sink.events[i].reason(),
              "input[0].size(0): expected " + std::to_string(n - 1) + ", got " + std::to_string(n));
    EXPECT_EQ(sink.events[i].cache_entries(), i + 1);
    EXPECT_EQ(Layers(sink.events[i]), std::vector<int32_t>{3});
  }
  const v1::CompileEvent& limit = sink.events[8];
  EXPECT_EQ(limit.kind(), Kind::RECOMPILE_LIMIT);
  EXPECT_NE(limit.reason().find("recompile_limit (8)"), std::string::npos) << limit.reason();
  EXPECT_NE(limit.reason().find("input[0].size(0): expected 11, got 12"), std::string::npos) << limit.reason();
  EXPECT_EQ(limit.cache_entries(), 8);

  const RegionStats& stats = ctx.FindCache(region.key())->stats();
  EXPECT_EQ(stats.misses, 10);
  EXPECT_EQ(stats.eager_fallbacks, 2);
  EXPECT_EQ(stats.hits, 0);
  // A cached shape still runs compiled after the limit.
  region({torch::randn({4, 16}).requires_grad_()}, params);
  EXPECT_EQ(stats.hits, 1);
  EXPECT_EQ(sink.events.size(), 9u);
}

TEST(CompiledRegionTest, RecompileReasonsNameGradModeRequiresGradAndDtype) {
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kJit), sink);
  CompiledRegion region(ctx, RegionKey("norm", {{"dim", 8}}), Norm, 0, nullptr);
  const Tensors params{torch::ones({8}).requires_grad_()};
  region({torch::randn({2, 8}).requires_grad_()}, params);
  {
    torch::NoGradGuard no_grad;
    region({torch::randn({2, 8}).requires_grad_()}, params);
  }
  region({torch::randn({2, 8})}, params);
  region({torch::randn({2, 8}, torch::kFloat64).requires_grad_()}, params);
  ASSERT_EQ(sink.Count(Kind::RECOMPILE), 3u);
  const auto recompiles = sink.OfKind(Kind::RECOMPILE);
  EXPECT_EQ(recompiles[0].reason(), "grad_mode: expected true, got false");
  EXPECT_EQ(recompiles[1].reason(), "input[0].requires_grad: expected true, got false");
  EXPECT_EQ(recompiles[2].reason(), "input[0].dtype: expected Float, got Double");
}

class JitVsEagerTest : public ::testing::TestWithParam<JitExecutorMode> {};

TEST_P(JitVsEagerTest, RmsNormSwiGluMatchesEagerOverFiveCalls) {
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kJit, GetParam()), sink);
  CompiledRegion region(ctx, RegionKey("ffn", {{"dim", 32}, {"hidden", 64}}), RmsSwiGlu, 0, nullptr);
  const Tensors params = RmsSwiGluParams(32, 64, 11);
  for (int call = 0; call < 5; ++call) {
    const Tensors inputs{torch::randn({24, 32}).requires_grad_()};
    const FwdBwd got = RunFwdBwd(Call(region), inputs, params);
    const FwdBwd want = RunFwdBwd(RmsSwiGlu, Fresh(inputs), Fresh(params));
    ExpectSameAsEager(got, want, 1e-5, "call " + std::to_string(call));
    if (GetParam() == JitExecutorMode::kSimple) {
      // SIMPLE keeps eager's per-op autograd, so gradients are bit-identical.
      for (size_t i = 0; i < want.grads.size(); ++i) EXPECT_TRUE(torch::equal(got.grads[i], want.grads[i]));
    }
  }
  EXPECT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(ctx.FindCache(region.key())->stats().hits, 4);
}

INSTANTIATE_TEST_SUITE_P(Executors, JitVsEagerTest,
                         ::testing::Values(JitExecutorMode::kSimple, JitExecutorMode::kProfiling),
                         [](const auto& info) {
                           return info.param == JitExecutorMode::kSimple ? std::string("Simple")
                                                                         : std::string("Profiling");
                         });

TEST(CompiledRegionTest, CompileMsComesFromTheInjectedClock) {
  RecordingSink sink;
  CompileOptions o = Options(CompileBackend::kJit);
  double now = 100;
  o.now_ms = [&now] { return now += 2.5; };
  CompileContext ctx(o, sink);
  CompiledRegion region(ctx, RegionKey("norm", {{"dim", 8}}), Norm, 0, nullptr);
  region({torch::randn({2, 8})}, {torch::ones({8})});
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].compile_ms(), 2.5);
  EXPECT_NE(sink.events[0].reason().find("backend=jit executor=simple grad_mode=true input[0]=Float[2, 8] cpu"),
            std::string::npos)
      << sink.events[0].reason();
}

TEST(CompiledRegionTest, EagerBackendCompilesNothingAndCountsCalls) {
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kEager), sink);
  CompiledRegion region(ctx, RegionKey("norm", {{"dim", 8}}), Norm, 1, nullptr);
  const Tensors params{torch::randn({8})};
  for (int64_t n = 1; n <= 3; ++n) {
    const Tensors inputs{torch::randn({n, 8})};
    EXPECT_TRUE(torch::equal(region(inputs, params)[0], Norm(inputs, params)[0]));
  }
  EXPECT_TRUE(sink.events.empty());
  ctx.Summary();
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].kind(), Kind::SUMMARY);
  EXPECT_EQ(sink.events[0].reason(), "hits=3 misses=0 eager_fallbacks=0 entries=0 backend=eager");
}

TEST(CompiledRegionTest, SummaryHasOneEventPerKeyWithItsLayers) {
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kJit), sink);
  const RegionKey norm_key("norm", {{"dim", 8}});
  CompiledRegion a0(ctx, norm_key, Norm, 0, nullptr);
  CompiledRegion a1(ctx, norm_key, Norm, 1, nullptr);
  CompiledRegion loss(ctx, RegionKey("loss", {{"vocab", 8}}), Norm, -1, nullptr);
  const Tensors params{torch::randn({8})};
  a0({torch::randn({2, 8})}, params);
  a1({torch::randn({2, 8})}, params);
  a1({torch::randn({2, 8})}, params);
  a0({torch::randn({3, 8})}, params);
  loss({torch::randn({2, 8})}, params);
  sink.events.clear();
  ctx.Summary();
  ASSERT_EQ(sink.events.size(), 2u);
  EXPECT_EQ(sink.events[0].region(), "norm{dim=8}");
  EXPECT_EQ(Layers(sink.events[0]), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(sink.events[0].reason(), "hits=2 misses=2 eager_fallbacks=0 entries=2 backend=jit");
  EXPECT_EQ(sink.events[0].cache_entries(), 2);
  EXPECT_EQ(sink.events[1].region(), "loss{vocab=8}");
  EXPECT_TRUE(Layers(sink.events[1]).empty());
  EXPECT_EQ(sink.events[1].reason(), "hits=0 misses=1 eager_fallbacks=0 entries=1 backend=jit");
}

TEST(CompiledRegionTest, GraphBreaksAreReportedOncePerLocationAndCause) {
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kEager), sink);
  const RegionKey router("moe_router", {{"experts", 8}});
  const std::string splits = "EP all-to-all: token split sizes are data-dependent (host sync)";
  for (int i = 0; i < 3; ++i) ctx.ReportGraphBreak(router, splits);
  ctx.ReportGraphBreak(router, "TP all-reduce");
  ctx.ReportGraphBreak(RegionKey("attention", {{"dim", 8}}), splits);
  ASSERT_EQ(sink.events.size(), 3u);
  EXPECT_EQ(sink.events[0].kind(), Kind::GRAPH_BREAK);
  EXPECT_EQ(sink.events[0].region(), "moe_router{experts=8}");
  EXPECT_EQ(sink.events[0].reason(), splits);
  EXPECT_EQ(sink.events[1].reason(), "TP all-reduce");
  EXPECT_EQ(sink.events[2].region(), "attention{dim=8}");
}

TEST(CompiledRegionTest, RegionCalledInsideATraceBecomesPartOfIt) {
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kJit), sink);
  CompiledRegion inner(ctx, RegionKey("norm", {{"dim", 8}}), Norm, 0, nullptr);
  CompiledRegion outer(
      ctx, RegionKey("block", {{"dim", 8}}),
      [&inner](const Tensors& in, const Tensors& p) { return Tensors{inner(in, p)[0] * 2}; }, 0, nullptr);
  const Tensors params{torch::randn({8})};
  for (int i = 0; i < 3; ++i) {
    const Tensors inputs{torch::randn({4, 8})};
    EXPECT_TRUE(torch::equal(outer(inputs, params)[0], Norm(inputs, params)[0] * 2));
  }
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].region(), "block{dim=8}");
  EXPECT_EQ(ctx.FindCache(inner.key())->size(), 0);
}

TEST(CompiledRegionTest, UndefinedInputIsAnErrorNamingTheRegion) {
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kJit), sink);
  CompiledRegion region(ctx, RegionKey("norm", {{"dim", 8}}), Norm, 4, nullptr);
  try {
    region({torch::Tensor()}, {torch::ones({8})});
    FAIL() << "accepted an undefined input";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "region norm{dim=8} (layer 4): guard capture: input[0] is undefined");
  }
  EXPECT_TRUE(sink.events.empty());
}

TEST(CompileContextTest, RefusesCudaGraphWhereItCannotCapture) {
  std::string why;
  if (CudaGraphsAvailable(&why)) GTEST_SKIP() << "a CUDA GPU is visible: cudagraph captures here";
  RecordingSink sink;
  try {
    CompileContext ctx(Options(CompileBackend::kCudaGraph), sink);
    FAIL() << "cudagraph accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), why);
#ifdef TRAINYARD_TORCH_CUDA
    EXPECT_EQ(why,
              "compile backend cudagraph needs a visible CUDA GPU; this process sees none (check "
              "CUDA_VISIBLE_DEVICES and the driver)");
#else
    EXPECT_EQ(why, "compile backend cudagraph needs a CUDA build of LibTorch; this engine was built for CPU");
#endif
  }
}

TEST(CompileContextTest, ParsesOptionNames) {
  EXPECT_EQ(ParseCompileBackend("jit"), CompileBackend::kJit);
  EXPECT_EQ(ParseCompileBackend("eager"), CompileBackend::kEager);
  EXPECT_EQ(ParseCompileBackend("cudagraph"), CompileBackend::kCudaGraph);
  EXPECT_THROW(ParseCompileBackend("inductor"), std::invalid_argument);
  EXPECT_EQ(ParseSideEffectPolicy("fallback"), SideEffectPolicy::kFallback);
  EXPECT_THROW(ParseSideEffectPolicy("ignore"), std::invalid_argument);
  // Every value the spec core admits maps to an option, and back to the same name.
  for (const std::string& name : spec::Backends()) EXPECT_EQ(CompileBackendName(ParseCompileBackend(name)), name);
  for (const std::string& name : spec::SideEffectPolicies()) {
    EXPECT_EQ(SideEffectPolicyName(ParseSideEffectPolicy(name)), name);
  }
  RecordingSink sink;
  CompileOptions o;
  o.recompile_limit = 0;
  EXPECT_THROW(CompileContext(o, sink), std::invalid_argument);
}

}  // namespace
}  // namespace trainyard::engine::compile
