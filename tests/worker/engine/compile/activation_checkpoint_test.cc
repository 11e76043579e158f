#include "worker/engine/compile/activation_checkpoint.h"

#include <gtest/gtest.h>

#include "tests/worker/engine/compile/recording_sink.h"
#include "tests/worker/engine/compile/region_test_util.h"
#include "worker/engine/compile/compile_context.h"
#include "worker/engine/compile/compiled_region.h"

namespace trainyard::engine::compile {
namespace {

using namespace testing;  // NOLINT: test helpers

// Inputs {x, w1, w2}: two outputs, so both need their own cotangent.
Tensors TwoLayer(const Tensors& in) {
  auto h = torch::tanh(torch::matmul(in[0], in[1].t()));
  return {torch::matmul(h, in[2].t()), h};
}

TEST(CheckpointTest, MatchesThePlainRunAndRecomputesOnceInBackward) {
  torch::manual_seed(5);
  const Tensors inputs{torch::randn({6, 8}).requires_grad_(), torch::randn({16, 8}).requires_grad_(),
                       torch::randn({8, 16})};  // w2 does not require grad
  int calls = 0;
  const CheckpointFn counted = [&calls](const Tensors& in) {
    ++calls;
    return TwoLayer(in);
  };
  const FwdBwd want = RunFwdBwd([](const Tensors& in, const Tensors&) { return TwoLayer(in); }, Fresh(inputs), {});

  const Tensors leaves = Fresh(inputs);
  const Tensors out = Checkpointed(counted, leaves);
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].requires_grad());
  auto loss = (out[0] * torch::linspace(-1, 1, out[0].numel()).view_as(out[0])).sum() +
              (out[1] * torch::linspace(-1, 1, out[1].numel()).view_as(out[1])).sum();
  const Tensors g = torch::autograd::grad({loss}, {leaves[0], leaves[1]});
  EXPECT_EQ(calls, 2);

  EXPECT_TRUE(torch::equal(out[0].detach(), want.outputs[0]));
  EXPECT_TRUE(torch::equal(out[1].detach(), want.outputs[1]));
  EXPECT_TRUE(torch::equal(g[0], want.grads[0]));
  EXPECT_TRUE(torch::equal(g[1], want.grads[1]));
  EXPECT_FALSE(want.grads[2].defined());
  EXPECT_FALSE(leaves[2].grad().defined());
}

TEST(CheckpointTest, OnlyOneOutputUsedInLoss) {
  const Tensors inputs{torch::randn({3, 4}).requires_grad_(), torch::randn({5, 4}).requires_grad_(),
                       torch::randn({4, 5}).requires_grad_()};
  const Tensors a = Fresh(inputs);
  const Tensors b = Fresh(inputs);
  const Tensors plain = TwoLayer(a);
  const Tensors ckpt = Checkpointed(TwoLayer, b);
  const Tensors ga = torch::autograd::grad({plain[1].sum()}, a, {}, false, false, /*allow_unused=*/true);
  const Tensors gb = torch::autograd::grad({ckpt[1].sum()}, b, {}, false, false, /*allow_unused=*/true);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(ga[i].defined(), gb[i].defined()) << i;
    if (ga[i].defined()) {
      EXPECT_TRUE(torch::equal(ga[i], gb[i])) << i;
    }
  }
  EXPECT_FALSE(gb[2].defined());  // w2 only feeds output 0
}

TEST(CheckpointTest, UnderNoGradItIsAPlainCall) {
  int calls = 0;
  torch::NoGradGuard no_grad;
  const Tensors out = Checkpointed(
      [&calls](const Tensors& in) {
        ++calls;
        return TwoLayer(in);
      },
      {torch::randn({2, 4}).requires_grad_(), torch::randn({3, 4}), torch::randn({4, 3})});
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(out[0].requires_grad());
}

TEST(CheckpointTest, RecomputeGoesThroughTheSameCompiledRegion) {
  RecordingSink sink;
  CompileContext ctx(CompileOptions{}, sink);  // jit
  CompiledRegion ffn(ctx, RegionKey("ffn", {{"dim", 16}, {"hidden", 32}}), RmsSwiGlu, 0, nullptr);
  const Tensors params = RmsSwiGluParams(16, 32, 3);
  // The layer: checkpoint over (x, params) so the params get gradients too.
  const TwoArgFn layer = [&ffn](const Tensors& in, const Tensors& p) {
    Tensors all{in[0]};
    all.insert(all.end(), p.begin(), p.end());
    return Checkpointed([&ffn](const Tensors& a) { return ffn({a[0]}, Tensors(a.begin() + 1, a.end())); }, all);
  };
  for (int step = 0; step < 2; ++step) {
    const Tensors inputs{torch::randn({5, 16}).requires_grad_()};
    const FwdBwd got = RunFwdBwd(layer, inputs, params);
    const FwdBwd want = RunFwdBwd(RmsSwiGlu, Fresh(inputs), Fresh(params));
    EXPECT_TRUE(torch::equal(got.outputs[0], want.outputs[0]));
    for (size_t i = 0; i < want.grads.size(); ++i) EXPECT_LE(MaxRelErr(got.grads[i], want.grads[i]), 1e-5) << i;
  }
  // Forward ran under no-grad, recompute under grad: two entries, then only hits.
  ASSERT_EQ(sink.events.size(), 2u);
  EXPECT_EQ(sink.events[0].kind(), v1::CompileEvent::COMPILE);
  EXPECT_NE(sink.events[0].reason().find("grad_mode=false"), std::string::npos) << sink.events[0].reason();
  EXPECT_EQ(sink.events[1].kind(), v1::CompileEvent::RECOMPILE);
  EXPECT_EQ(sink.events[1].reason(), "grad_mode: expected false, got true");
  const RegionStats& stats = ctx.FindCache(ffn.key())->stats();
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.hits, 2);
}

}  // namespace
}  // namespace trainyard::engine::compile
