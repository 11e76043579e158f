// The cudagraph backend's autograd plumbing on CPU: CompiledRegion with backend
// cudagraph and RerunCaptures (a "graph" that runs its body again on replay and copies
// the results into the tensors of its capture, as a CUDA graph rewrites its memory),
// against eager runs of the same function. What only a GPU shows (the captured kernels reading
// and writing the same memory) is deploy/gpu-check.sh's cudagraph check.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "tests/worker/engine/compile/recording_sink.h"
#include "tests/worker/engine/compile/region_test_util.h"
#include "worker/engine/compile/backend/graph_capture.h"
#include "worker/engine/compile/compile_context.h"
#include "worker/engine/compile/compiled_region.h"

namespace trainyard::engine::compile {
namespace {

using namespace testing;  // NOLINT: test helpers
using Kind = v1::CompileEvent;

CompileOptions GraphOptions(int recompile_limit = 8) {
  CompileOptions o;
  o.backend = CompileBackend::kCudaGraph;
  o.graph_captures = RerunCaptures();
  o.recompile_limit = recompile_limit;
  return o;
}

TwoArgFn Graphed(CompiledRegion& r) {
  return [&r](const Tensors& in, const Tensors& p) { return r(in, p); };
}

void ExpectClose(const FwdBwd& got, const FwdBwd& want, const std::string& what) {
  ASSERT_EQ(got.outputs.size(), want.outputs.size()) << what;
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    EXPECT_LE(MaxRelErr(got.outputs[i], want.outputs[i]), 1e-6) << what << " output " << i;
  }
  ASSERT_EQ(got.grads.size(), want.grads.size()) << what;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].defined(), want.grads[i].defined()) << what << " grad " << i;
    if (want.grads[i].defined()) EXPECT_LE(MaxRelErr(got.grads[i], want.grads[i]), 1e-6) << what << " grad " << i;
  }
}

TEST(CudaGraphBackendTest, ReplaysEqualEagerForwardAndBackwardOnNewInputs) {
  RecordingSink sink;
  CompileContext ctx(GraphOptions(), sink);
  CompiledRegion region(ctx, RegionKey("ffn", {{"dim", 16}, {"hidden", 32}}), RmsSwiGlu, 2, nullptr);
  const Tensors params = RmsSwiGluParams(16, 32, 11);
  for (int call = 0; call < 4; ++call) {
    torch::manual_seed(40 + call);
    const Tensors x = {torch::randn({6, 16}).requires_grad_()};
    ExpectClose(RunFwdBwd(Graphed(region), Fresh(x), params), RunFwdBwd(RmsSwiGlu, Fresh(x), params),
                "call " + std::to_string(call));
  }
  ASSERT_EQ(sink.Count(Kind::COMPILE), 1u);
  EXPECT_NE(sink.events[0].reason().find("backend=cudagraph forward+backward graphs"), std::string::npos)
      << sink.events[0].reason();
  EXPECT_EQ(Layers(sink.events[0]), std::vector<int32_t>{2});
  const RegionStats& s = ctx.FindCache(region.key())->stats();
  EXPECT_EQ(s.misses, 1);
  EXPECT_EQ(s.hits, 3);
  EXPECT_EQ(s.eager_fallbacks, 0);
}

TEST(CudaGraphBackendTest, GradientsAccumulateIntoParamsAcrossMicroBatches) {
  // Three micro-batches through a graphed region, backward each: the params' .grad is
  // the sum of all, as eager makes it.
  RecordingSink sink;
  CompileContext ctx(GraphOptions(), sink);
  CompiledRegion region(ctx, RegionKey("ffn", {{"dim", 8}, {"hidden", 16}}), RmsSwiGlu, 0, nullptr);
  const Tensors graphed = RmsSwiGluParams(8, 16, 3);
  const Tensors eager = Fresh(graphed);
  torch::manual_seed(5);
  const Tensors batches = {torch::randn({4, 8}), torch::randn({4, 8}), torch::randn({4, 8})};
  for (const torch::Tensor& x : batches) {
    region({x}, graphed)[0].pow(2).sum().backward();
    RmsSwiGlu({x}, eager)[0].pow(2).sum().backward();
  }
  for (size_t i = 0; i < graphed.size(); ++i) {
    ASSERT_TRUE(graphed[i].grad().defined()) << i;
    EXPECT_LE(MaxRelErr(graphed[i].grad(), eager[i].grad()), 1e-6) << "param " << i;
  }
}

TEST(CudaGraphBackendTest, EachCallSiteCapturesItsOwnGraphs) {
  // Layers sharing a key keep separate graphs: a layer's forward memory holds what its
  // backward reads. Both forwards run before either backward, as in a model.
  RecordingSink sink;
  CompileContext ctx(GraphOptions(), sink);
  const RegionKey key("ffn", {{"dim", 8}, {"hidden", 16}});
  CompiledRegion first(ctx, key, RmsSwiGlu, 0, nullptr);
  CompiledRegion second(ctx, key, RmsSwiGlu, 1, nullptr);
  const Tensors w0 = RmsSwiGluParams(8, 16, 1), w1 = RmsSwiGluParams(8, 16, 2);
  auto two_layers = [&](const Tensors& in, const Tensors& p) {
    const Tensors a = {p[0], p[1], p[2], p[3]}, b = {p[4], p[5], p[6], p[7]};
    return first({second(in, b)[0]}, a);
  };
  auto eager = [](const Tensors& in, const Tensors& p) {
    return RmsSwiGlu({RmsSwiGlu(in, {p[4], p[5], p[6], p[7]})[0]}, {p[0], p[1], p[2], p[3]});
  };
  Tensors params(w0);
  params.insert(params.end(), w1.begin(), w1.end());
  for (int call = 0; call < 3; ++call) {
    torch::manual_seed(60 + call);
    const Tensors x = {torch::randn({5, 8}).requires_grad_()};
    ExpectClose(RunFwdBwd(two_layers, Fresh(x), params), RunFwdBwd(eager, Fresh(x), params),
                "call " + std::to_string(call));
  }
  EXPECT_EQ(sink.Count(Kind::COMPILE), 2u);  // one capture per call site
  EXPECT_EQ(ctx.FindCache(key)->stats().hits, 4);
}

TEST(CudaGraphBackendTest, ANewShapeCapturesAgainAndTheLimitRunsEager) {
  RecordingSink sink;
  CompileContext ctx(GraphOptions(/*recompile_limit=*/2), sink);
  CompiledRegion region(ctx, RegionKey("ffn", {{"dim", 8}, {"hidden", 16}}), RmsSwiGlu, 0, nullptr);
  const Tensors params = RmsSwiGluParams(8, 16, 9);
  for (int64_t rows : {4, 6, 7, 4, 7}) {
    torch::manual_seed(rows);
    const Tensors x = {torch::randn({rows, 8}).requires_grad_()};
    ExpectClose(RunFwdBwd(Graphed(region), Fresh(x), params), RunFwdBwd(RmsSwiGlu, Fresh(x), params),
                "rows " + std::to_string(rows));
  }
  EXPECT_EQ(sink.Count(Kind::COMPILE), 1u);
  EXPECT_EQ(sink.Count(Kind::RECOMPILE), 1u);
  ASSERT_EQ(sink.Count(Kind::RECOMPILE_LIMIT), 1u);
  const RegionStats& s = ctx.FindCache(region.key())->stats();
  EXPECT_EQ(s.misses, 4);  // 4, 6, and both calls with 7 (over the limit)
  EXPECT_EQ(s.eager_fallbacks, 2);
  EXPECT_EQ(s.hits, 1);  // the second 4
}

TEST(CudaGraphBackendTest, NoGradCallsGetAForwardGraphOfTheirOwn) {
  RecordingSink sink;
  CompileContext ctx(GraphOptions(), sink);
  CompiledRegion region(ctx, RegionKey("norm", {{"dim", 8}}), RmsSwiGlu, 0, nullptr);
  const Tensors params = RmsSwiGluParams(8, 16, 4);
  torch::NoGradGuard no_grad;
  for (int call = 0; call < 2; ++call) {
    const torch::Tensor x = torch::randn({3, 8});
    EXPECT_LE(MaxRelErr(region({x}, params)[0], RmsSwiGlu({x}, params)[0]), 1e-6);
  }
  ASSERT_EQ(sink.Count(Kind::COMPILE), 1u);
  EXPECT_NE(sink.events[0].reason().find("backend=cudagraph forward graph "), std::string::npos);
}

TEST(CudaGraphBackendTest, ASecondForwardBeforeTheBackwardRunsEager) {
  // The graph's memory still holds the first call's activations for its backward, so
  // a second grad-mode call of the same site runs eager and both backwards are right.
  RecordingSink sink;
  CompileContext ctx(GraphOptions(), sink);
  CompiledRegion region(ctx, RegionKey("ffn", {{"dim", 8}, {"hidden", 16}}), RmsSwiGlu, 0, nullptr);
  const Tensors params = RmsSwiGluParams(8, 16, 8);
  region({torch::randn({4, 8})}, params)[0].sum().backward();  // captures
  for (auto& p : params) p.mutable_grad() = torch::Tensor();
  const Tensors eager = Fresh(params);
  const torch::Tensor a = torch::randn({4, 8}), b = torch::randn({4, 8});
  const torch::Tensor la = region({a}, params)[0].pow(2).sum();
  const torch::Tensor lb = region({b}, params)[0].pow(2).sum();
  (la + 2 * lb).backward();
  (RmsSwiGlu({a}, eager)[0].pow(2).sum() + 2 * RmsSwiGlu({b}, eager)[0].pow(2).sum()).backward();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_LE(MaxRelErr(params[i].grad(), eager[i].grad()), 1e-6) << i;
  const RegionStats& s = ctx.FindCache(region.key())->stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.eager_fallbacks, 1);
}

TEST(CudaGraphBackendTest, OutputsAliasTheGraphUntilTheSiteRunsForwardAgain) {
  // The documented contract, which the rerun capture reproduces: a kept output is the
  // graph's memory, rewritten by the site's next forward.
  RecordingSink sink;
  CompileContext ctx(GraphOptions(), sink);
  CompiledRegion region(ctx, RegionKey("ffn", {{"dim", 8}, {"hidden", 16}}), RmsSwiGlu, 0, nullptr);
  const Tensors params = RmsSwiGluParams(8, 16, 6);
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::randn({4, 8}), b = torch::randn({4, 8});
  region({a}, params);  // captures
  const torch::Tensor kept = region({a}, params)[0];
  EXPECT_TRUE(torch::allclose(kept, RmsSwiGlu({a}, params)[0]));
  region({b}, params);
  EXPECT_TRUE(torch::allclose(kept, RmsSwiGlu({b}, params)[0]));
}

TEST(CudaGraphBackendTest, AForwardWhoseGraphIsDroppedDoesNotBlockTheNext) {
  // A validation forward in grad mode never runs backward; once its outputs are gone
  // the site replays again instead of running eager for the rest of the run.
  RecordingSink sink;
  CompileContext ctx(GraphOptions(), sink);
  CompiledRegion region(ctx, RegionKey("ffn", {{"dim", 8}, {"hidden", 16}}), RmsSwiGlu, 0, nullptr);
  const Tensors params = RmsSwiGluParams(8, 16, 5);
  const torch::Tensor x = torch::randn({4, 8});
  region({x}, params)[0].sum().backward();  // captures
  {
    const double validation = region({x}, params)[0].pow(2).mean().item<double>();
    (void)validation;
  }
  region({x}, params)[0].sum().backward();
  const RegionStats& s = ctx.FindCache(region.key())->stats();
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.eager_fallbacks, 0);
}

TEST(CudaGraphBackendTest, OutputsWithoutAGradientStayNonDifferentiable) {
  RecordingSink sink;
  CompileContext ctx(GraphOptions(), sink);
  RegionFn two = [](const Tensors& in, const Tensors& p) { return Tensors{in[0] * p[0], in[0].detach().abs().sum(0)}; };
  CompiledRegion region(ctx, RegionKey("two", {}), two, 0, nullptr);
  const torch::Tensor w = torch::randn({4}, torch::requires_grad());
  for (int call = 0; call < 2; ++call) {
    const Tensors out = region({torch::randn({3, 4})}, {w});
    EXPECT_TRUE(out[0].requires_grad()) << call;
    EXPECT_FALSE(out[1].requires_grad()) << call;
    out[0].sum().backward();
  }
}

TEST(CudaGraphBackendTest, ARetainedGraphAfterAnotherForwardIsRefused) {
  RecordingSink sink;
  CompileContext ctx(GraphOptions(), sink);
  CompiledRegion region(ctx, RegionKey("ffn", {{"dim", 8}, {"hidden", 16}}), RmsSwiGlu, 0, nullptr);
  const Tensors params = RmsSwiGluParams(8, 16, 5);
  region({torch::randn({4, 8})}, params)[0].sum().backward();  // captures
  const torch::Tensor loss = region({torch::randn({4, 8})}, params)[0].sum();
  loss.backward({}, /*retain_graph=*/true);
  region({torch::randn({4, 8})}, params)[0].sum().backward();
  try {
    loss.backward();
    FAIL() << "a retained graph was differentiated against another forward's activations";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has run forward again"), std::string::npos) << e.what();
  }
}

TEST(CudaGraphBackendTest, AParamInNewMemoryIsRefusedNotReadStale) {
  RecordingSink sink;
  CompileContext ctx(GraphOptions(), sink);
  CompiledRegion region(ctx, RegionKey("ffn", {{"dim", 8}, {"hidden", 16}}), RmsSwiGlu, 0, nullptr);
  Tensors params = RmsSwiGluParams(8, 16, 8);
  const torch::Tensor x = torch::randn({4, 8});
  region({x}, params)[0].sum().backward();
  params[1] = params[1].detach().clone().requires_grad_();  // what an FSDP re-gather does
  try {
    region({x}, params);
    FAIL() << "a moved param was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("param 1 of this region lives in other memory"), std::string::npos)
        << e.what();
  }
}

TEST(CudaGraphBackendTest, DynamicDimKeysRunThroughJit) {
  RecordingSink sink;
  CompileContext ctx(GraphOptions(), sink);
  CompiledRegion region(ctx, RegionKey("expert", {{"dim", 8}, {"hidden", 16}}), RmsSwiGlu, 0, nullptr);
  region.SetDynamicDim(0, 0);
  const Tensors params = RmsSwiGluParams(8, 16, 2);
  for (int64_t rows : {3, 5}) {
    const Tensors x = {torch::randn({rows, 8}).requires_grad_()};
    ExpectClose(RunFwdBwd(Graphed(region), Fresh(x), params), RunFwdBwd(RmsSwiGlu, Fresh(x), params), "jit");
  }
  ASSERT_EQ(sink.Count(Kind::COMPILE), 1u);
  EXPECT_NE(sink.events[0].reason().find("backend=jit"), std::string::npos) << sink.events[0].reason();
}

TEST(CudaGraphBackendTest, ASideEffectIsCaughtBeforeCapture) {
  RecordingSink sink;
  CompileOptions o = GraphOptions();
  o.on_side_effect = SideEffectPolicy::kError;
  CompileContext ctx(o, sink);
  auto counter = std::make_shared<torch::Tensor>(torch::zeros({1}));
  auto watched = std::make_shared<WatchedTensors>();
  watched->emplace_back("counter", *counter);
  RegionFn writes = [counter](const Tensors& in, const Tensors& p) {
    torch::NoGradGuard no_grad;
    counter->add_(1);
    return Tensors{in[0] * p[0]};
  };
  CompiledRegion region(ctx, RegionKey("bad", {}), writes, 0, watched);
  EXPECT_THROW(region({torch::randn({2, 4})}, {torch::ones({4}, torch::requires_grad())}), std::runtime_error);
  EXPECT_EQ(counter->item<float>(), 1.0f);  // written once, by the probed eager run only
  EXPECT_EQ(sink.Count(Kind::UNSAFE_SIDE_EFFECT), 1u);
}

}  // namespace
}  // namespace trainyard::engine::compile
