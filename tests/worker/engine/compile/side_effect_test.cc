#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "tests/worker/engine/compile/recording_sink.h"
#include "tests/worker/engine/compile/region_test_util.h"
#include "worker/engine/compile/compile_context.h"
#include "worker/engine/compile/compiled_region.h"

namespace trainyard::engine::compile {
namespace {

using namespace testing;  // NOLINT: test helpers
using Kind = v1::CompileEvent;

constexpr char kCounterName[] = "layers.2.moe.tokens_per_expert";

CompileOptions Options(CompileBackend backend, SideEffectPolicy policy) {
  CompileOptions o;
  o.backend = backend;
  o.on_side_effect = policy;
  return o;
}

// A MoE-like layer whose region illegally bumps a load counter it did not receive.
struct CountingLayer {
  torch::Tensor counter = torch::zeros({4}, torch::kInt64);
  torch::Tensor w = torch::randn({8}).requires_grad_();
  std::shared_ptr<const WatchedTensors> watched =
      std::make_shared<const WatchedTensors>(WatchedTensors{{kCounterName, counter}, {"layers.2.moe.w", w}});

  RegionFn Fn() const {
    torch::Tensor c = counter;  // same tensor
    return [c](const Tensors& in, const Tensors& p) mutable {
      c.add_(1);
      return Tensors{in[0] * p[0] + c.sum()};
    };
  }
  // What a correct run returns on the k-th call (the counter then holds k everywhere).
  torch::Tensor Expected(const torch::Tensor& x, int64_t k) const { return x * w + 4 * k; }
};

bool Mentions(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(SideEffectTest, JitErrorPolicyThrowsNamingRegionAndTensor) {
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kJit, SideEffectPolicy::kError), sink);
  CountingLayer layer;
  CompiledRegion region(ctx, RegionKey("moe", {{"experts", 4}}), layer.Fn(), 2, layer.watched);
  try {
    region({torch::randn({3, 8})}, {layer.w});
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(Mentions(e.what(), kCounterName)) << e.what();
    EXPECT_TRUE(Mentions(e.what(), "moe{experts=4}")) << e.what();
  }
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].kind(), Kind::UNSAFE_SIDE_EFFECT);
  EXPECT_TRUE(Mentions(sink.events[0].reason(), kCounterName)) << sink.events[0].reason();
  EXPECT_EQ(Layers(sink.events[0]), std::vector<int32_t>{2});
  // The receiving param w is watched too, but was passed in: not reported.
  EXPECT_FALSE(Mentions(sink.events[0].reason(), "layers.2.moe.w"));
  // The traced call ran fn once; nothing replays it.
  EXPECT_EQ(layer.counter.sum().item<int64_t>(), 4);
}

TEST(SideEffectTest, JitFallbackRunsEagerAndWritesExactlyOncePerCall) {
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kJit, SideEffectPolicy::kFallback), sink);
  CountingLayer layer;
  CompiledRegion region(ctx, RegionKey("moe", {{"experts", 4}}), layer.Fn(), 2, layer.watched);
  for (int64_t k = 1; k <= 3; ++k) {
    const torch::Tensor x = torch::randn({3, 8});
    const Tensors out = region({x}, {layer.w});
    EXPECT_TRUE(torch::allclose(out[0], layer.Expected(x, k))) << "call " << k;
    EXPECT_TRUE(torch::equal(layer.counter, torch::full({4}, k, torch::kInt64))) << "call " << k;
  }
  ASSERT_EQ(sink.events.size(), 2u);
  EXPECT_EQ(sink.events[0].kind(), Kind::UNSAFE_SIDE_EFFECT);
  EXPECT_EQ(sink.events[1].kind(), Kind::FALLBACK);
  EXPECT_TRUE(Mentions(sink.events[1].reason(), kCounterName)) << sink.events[1].reason();
  const RegionStats& stats = ctx.FindCache(region.key())->stats();
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.eager_fallbacks, 3);
  EXPECT_EQ(stats.hits, 0);
}

TEST(SideEffectTest, EagerBackendProbesTheFirstCall) {
  {
    RecordingSink sink;
    CompileContext ctx(Options(CompileBackend::kEager, SideEffectPolicy::kError), sink);
    CountingLayer layer;
    CompiledRegion region(ctx, RegionKey("moe", {{"experts", 4}}), layer.Fn(), 2, layer.watched);
    try {
      region({torch::randn({3, 8})}, {layer.w});
      FAIL() << "no error";
    } catch (const std::runtime_error& e) {
      EXPECT_TRUE(Mentions(e.what(), kCounterName)) << e.what();
    }
    EXPECT_EQ(sink.Count(Kind::UNSAFE_SIDE_EFFECT), 1u);
  }
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kEager, SideEffectPolicy::kFallback), sink);
  CountingLayer layer;
  CompiledRegion region(ctx, RegionKey("moe", {{"experts", 4}}), layer.Fn(), 2, layer.watched);
  for (int64_t k = 1; k <= 3; ++k) {
    const torch::Tensor x = torch::randn({3, 8});
    EXPECT_TRUE(torch::allclose(region({x}, {layer.w})[0], layer.Expected(x, k)));
  }
  EXPECT_TRUE(torch::equal(layer.counter, torch::full({4}, 3, torch::kInt64)));
  ASSERT_EQ(sink.events.size(), 1u);  // already eager: no FALLBACK
  EXPECT_EQ(sink.events[0].kind(), Kind::UNSAFE_SIDE_EFFECT);
}

TEST(SideEffectTest, WritingAReceivedTensorIsPartOfTheGraph) {
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kJit, SideEffectPolicy::kError), sink);
  CountingLayer layer;
  CompiledRegion region(
      ctx, RegionKey("moe", {{"experts", 4}}),
      [](const Tensors& in, const Tensors& p) {
        in[1].add_(1);
        return Tensors{in[0] * p[0] + in[1].sum()};
      },
      2, layer.watched);
  for (int64_t k = 1; k <= 3; ++k) {
    const torch::Tensor x = torch::randn({3, 8});
    const Tensors out = region({x, layer.counter}, {layer.w});
    EXPECT_TRUE(torch::allclose(out[0], layer.Expected(x, k))) << "call " << k;
    // Once per call: the compiling call returns the traced run's outputs.
    EXPECT_TRUE(torch::equal(layer.counter, torch::full({4}, k, torch::kInt64))) << "call " << k;
  }
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].kind(), Kind::COMPILE);
  EXPECT_EQ(ctx.FindCache(region.key())->stats().hits, 2);
}

TEST(SideEffectTest, ReadingStateItDidNotReceiveIsRejected) {
  torch::Tensor bias = torch::zeros({8});
  auto watched = std::make_shared<const WatchedTensors>(WatchedTensors{{"layers.0.moe.expert_bias", bias}});
  const RegionFn fn = [bias](const Tensors& in, const Tensors&) { return Tensors{in[0] + bias}; };
  {
    RecordingSink sink;
    CompileContext ctx(Options(CompileBackend::kJit, SideEffectPolicy::kError), sink);
    CompiledRegion region(ctx, RegionKey("router", {{"experts", 8}}), fn, 0, watched);
    try {
      region({torch::randn({2, 8})}, {});
      FAIL() << "no error";
    } catch (const std::runtime_error& e) {
      EXPECT_TRUE(Mentions(e.what(), "reads layers.0.moe.expert_bias")) << e.what();
    }
    EXPECT_TRUE(sink.events.empty());
  }
  RecordingSink sink;
  CompileContext ctx(Options(CompileBackend::kJit, SideEffectPolicy::kFallback), sink);
  CompiledRegion region(ctx, RegionKey("router", {{"experts", 8}}), fn, 0, watched);
  for (int k = 0; k < 3; ++k) {
    const torch::Tensor x = torch::randn({2, 8});
    EXPECT_TRUE(torch::equal(region({x}, {})[0], x + k));
    bias.add_(1);  // the optimizer-style update the region must see
  }
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].kind(), Kind::FALLBACK);
  EXPECT_TRUE(Mentions(sink.events[0].reason(), "layers.0.moe.expert_bias")) << sink.events[0].reason();
}

TEST(SideEffectTest, WatchModuleNamesParametersAndBuffers) {
  torch::nn::Sequential model(torch::nn::Linear(4, 2), torch::nn::BatchNorm1d(2));
  const WatchedTensors watched = WatchModule(*model);
  std::vector<std::string> names;
  for (const auto& [name, t] : watched) names.push_back(name);
  const std::vector<std::string> expected{
      "0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"};
  EXPECT_EQ(names, expected);
}

}  // namespace
}  // namespace trainyard::engine::compile
