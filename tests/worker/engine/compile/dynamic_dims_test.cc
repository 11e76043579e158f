#include <gtest/gtest.h>

#include <string>

#include "tests/worker/engine/compile/recording_sink.h"
#include "tests/worker/engine/compile/region_test_util.h"
#include "worker/engine/compile/compile_context.h"
#include "worker/engine/compile/compiled_region.h"
#include "worker/engine/compile/region/region_guard.h"

namespace trainyard::engine::compile {
namespace {

using namespace testing;  // NOLINT: test helpers
using Kind = v1::CompileEvent;

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Shape-generic along rows: nothing in it reads a size.
Tensors RowsFfn(const Tensors& in, const Tensors& p) { return {torch::silu(torch::matmul(in[0], p[0].t()))}; }

// Reads rows as a C++ int, which a trace bakes in as a constant.
Tensors RowsPairSum(const Tensors& in, const Tensors&) {
  const int64_t rows = in[0].size(0);
  return {in[0].reshape({rows, 1, -1}).sum(1) * 2};
}

TEST(GuardSetDynamicTest, DynamicSizeIsNotGuardedButDimCountIs) {
  const GuardSet g = GuardSet::Capture({torch::zeros({5, 8})}, {}, true, {{0, 0}});
  EXPECT_TRUE(g.Matches({torch::zeros({9, 8})}, {}, true));
  EXPECT_EQ(g.Check({torch::zeros({9, 4})}, {}, true), "input[0].size(1): expected 8, got 4");
  EXPECT_EQ(g.Check({torch::zeros({9})}, {}, true), "input[0].dim(): expected 2, got 1");
  EXPECT_EQ(g.ToString(), "grad_mode=true input[0]=Float[?, 8] cpu");
  EXPECT_THROW(GuardSet::Capture({torch::zeros({5})}, {}, true, {{0, 1}}), std::invalid_argument);
  EXPECT_THROW(GuardSet::Capture({torch::zeros({5})}, {}, true, {{1, 0}}), std::invalid_argument);
}

TEST(DynamicDimsTest, ShapeGenericRegionCompilesOnceForEveryRowCount) {
  RecordingSink sink;
  CompileContext ctx(CompileOptions{}, sink);
  CompiledRegion a(ctx, RegionKey("expert_ffn", {{"dim", 8}}), RowsFfn, 0, nullptr);
  CompiledRegion b(ctx, RegionKey("expert_ffn", {{"dim", 8}}), RowsFfn, 1, nullptr);
  a.SetDynamicDim(0, 0);
  b.SetDynamicDim(0, 0);  // same key: idempotent
  const Tensors params{torch::randn({16, 8}).requires_grad_()};
  const std::vector<int64_t> row_counts{3, 5, 1, 7};
  for (size_t i = 0; i < row_counts.size(); ++i) {
    const int64_t rows = row_counts[i];
    CompiledRegion& layer = i % 2 == 0 ? a : b;
    const Tensors inputs{torch::randn({rows, 8}).requires_grad_()};
    const FwdBwd got =
        RunFwdBwd([&layer](const Tensors& in, const Tensors& p) { return layer(in, p); }, inputs, params);
    const FwdBwd want = RunFwdBwd(RowsFfn, Fresh(inputs), Fresh(params));
    EXPECT_TRUE(torch::equal(got.outputs[0], want.outputs[0])) << rows;
    for (size_t g = 0; g < want.grads.size(); ++g) EXPECT_LE(MaxRelErr(got.grads[g], want.grads[g]), 1e-5);
  }
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].kind(), Kind::COMPILE);
  EXPECT_TRUE(Contains(sink.events[0].reason(), "input[0]=Float[?, 8]")) << sink.events[0].reason();
  EXPECT_EQ(ctx.FindCache(a.key())->stats().hits, 3);
  // A declaration the existing entry was not guarded with is a programming error.
  EXPECT_THROW(a.SetDynamicDim(0, 1), std::logic_error);
}

TEST(DynamicDimsTest, SpecialisedTraceIsCaughtAndGuarded) {
  RecordingSink sink;
  CompileContext ctx(CompileOptions{}, sink);
  CompiledRegion region(ctx, RegionKey("pairs", {{"dim", 8}}), RowsPairSum, 0, nullptr);
  region.SetDynamicDim(0, 0);
  for (int64_t rows : {3, 5, 3}) {
    const Tensors inputs{torch::randn({rows, 8})};
    EXPECT_TRUE(torch::equal(region(inputs, {})[0], RowsPairSum(inputs, {})[0])) << rows;
  }
  ASSERT_EQ(sink.events.size(), 2u);
  EXPECT_EQ(sink.events[0].kind(), Kind::COMPILE);
  EXPECT_TRUE(Contains(sink.events[0].reason(), "input[0]=Float[3, 8]")) << sink.events[0].reason();
  EXPECT_TRUE(Contains(sink.events[0].reason(), "input[0].size(0) is declared dynamic but the trace specialised"))
      << sink.events[0].reason();
  EXPECT_EQ(sink.events[1].kind(), Kind::RECOMPILE);
  EXPECT_TRUE(Contains(sink.events[1].reason(), "input[0].size(0): expected 3, got 5")) << sink.events[1].reason();
  EXPECT_EQ(ctx.FindCache(region.key())->stats().hits, 1);
}

TEST(DynamicDimsTest, ZeroRowsAreGuardedForThatEntry) {
  RecordingSink sink;
  CompileContext ctx(CompileOptions{}, sink);
  CompiledRegion region(ctx, RegionKey("expert_ffn", {{"dim", 8}}), RowsFfn, 0, nullptr);
  region.SetDynamicDim(0, 0);
  const Tensors params{torch::randn({16, 8})};
  for (int64_t rows : {0, 4, 6, 0}) {
    const Tensors inputs{torch::randn({rows, 8})};
    EXPECT_TRUE(torch::equal(region(inputs, params)[0], RowsFfn(inputs, params)[0])) << rows;
  }
  ASSERT_EQ(sink.events.size(), 2u);
  EXPECT_TRUE(Contains(sink.events[0].reason(), "input[0]=Float[0, 8]")) << sink.events[0].reason();
  EXPECT_EQ(sink.events[1].reason(), "input[0].size(0): expected 0, got 4");
  EXPECT_EQ(ctx.FindCache(region.key())->stats().hits, 2);
}

}  // namespace
}  // namespace trainyard::engine::compile
