// The fused CPU kernels as LibTorch operators: a traced region holds the operator (one
// node per call, none of the composite ops it replaces), the traced graph computes
// exactly what the eager call computes (same kernel: bitwise-equal outputs and
// gradients), the grouped experts stay valid for any row count, the A/B switch runs
// the operators' reference instead, and the kernels refuse malformed arguments.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "worker/engine/compile/backend/jit_executable.h"
#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"
#include "worker/engine/kernels/ops.h"
#include "worker/engine/model/layers/dense_ffn.h"
#include "worker/engine/model/layers/rms_norm.h"
#include "worker/engine/model/moe/grouped_experts.h"
#include "worker/engine/model/moe/moe_layer.h"

namespace trainyard::engine {
namespace {

using compile::JitExecutable;
using compile::JitExecutorMode;
using torch::Tensor;

std::map<std::string, int> NodeKinds(const torch::jit::Graph& graph) {
  std::map<std::string, int> kinds;
  for (const torch::jit::Node* node : graph.nodes()) ++kinds[node->kind().toQualString()];
  return kinds;
}

JitExecutable::Traced Trace(const compile::RegionFn& fn, const std::vector<Tensor>& in,
                            const std::vector<Tensor>& params) {
  return JitExecutable::Trace(fn, in, params, "test", JitExecutorMode::kAuto);
}

std::vector<Tensor> Params(std::vector<std::vector<int64_t>> shapes) {
  std::vector<Tensor> out;
  for (const auto& s : shapes) out.push_back((torch::randn(s) * 0.2).requires_grad_(true));
  return out;
}

// Outputs and the gradients of sum(out · proj) with respect to `params` and input 0.
struct Result {
  Tensor out, dx;
  std::vector<Tensor> dparams;
};

template <typename Call>
Result RunWithGrads(Call&& call, const Tensor& x_in, std::vector<Tensor> rest, const std::vector<Tensor>& params,
                    const Tensor& proj) {
  for (const auto& p : params) p.mutable_grad() = Tensor();
  Tensor x = x_in.detach().clone().requires_grad_(true);
  rest.insert(rest.begin(), x);
  Result r;
  r.out = call(rest, params)[0];
  (r.out * proj).sum().backward();
  r.dx = x.grad();
  for (const auto& p : params) r.dparams.push_back(p.grad().clone());
  return r;
}

void ExpectIdentical(const Result& a, const Result& b) {
  EXPECT_TRUE(torch::equal(a.out, b.out));
  EXPECT_TRUE(torch::equal(a.dx, b.dx));
  ASSERT_EQ(a.dparams.size(), b.dparams.size());
  for (size_t i = 0; i < a.dparams.size(); ++i) EXPECT_TRUE(torch::equal(a.dparams[i], b.dparams[i])) << "param " << i;
}

TEST(FusedOperatorsTest, TracedFfnHoldsTheOperatorsAndRunsTheSameKernels) {
  ASSERT_TRUE(fused::Enabled());
  torch::manual_seed(1);
  const auto params = Params({{24, 16}, {16, 24}, {24, 16}});
  const Tensor x = torch::randn({2, 5, 16});
  auto traced = Trace(regions::Ffn(), {x}, params);
  const auto kinds = NodeKinds(traced.executable->graph());
  EXPECT_EQ(kinds.count("trainyard::linear") ? kinds.at("trainyard::linear") : 0, 2);
  EXPECT_EQ(kinds.count("trainyard::swiglu") ? kinds.at("trainyard::swiglu") : 0, 1);
  for (const char* composite : {"aten::linear", "aten::matmul", "aten::mm", "aten::silu", "aten::mul"}) {
    EXPECT_EQ(kinds.count(composite), 0u) << composite << " in the traced graph";
  }
  const Tensor proj = torch::randn({2, 5, 16});
  const Result eager = RunWithGrads(regions::Ffn(), x, {}, params, proj);
  const Result graph = RunWithGrads(
      [&](const std::vector<Tensor>& in, const std::vector<Tensor>& p) { return traced.executable->Run(in, p); }, x, {},
      params, proj);
  ExpectIdentical(graph, eager);
}

TEST(FusedOperatorsTest, TracedRmsNormAndCombineHoldTheirOperators) {
  torch::manual_seed(2);
  const auto w = Params({{16}});
  auto norm = Trace(regions::RmsNorm(1e-6), {torch::randn({3, 16})}, w);
  const auto norm_kinds = NodeKinds(norm.executable->graph());
  EXPECT_EQ(norm_kinds.count("trainyard::rms_norm"), 1u);
  EXPECT_EQ(norm_kinds.count("aten::rsqrt"), 0u);

  const Tensor y = torch::randn({6, 16}), gates = torch::rand({6, 1});
  const Tensor ids = torch::tensor(std::vector<int64_t>{0, 2, 1, 0, 2, 1});
  auto combine = Trace(regions::Combine(), {y, gates, ids, torch::zeros({3, 16})}, {});
  const auto combine_kinds = NodeKinds(combine.executable->graph());
  EXPECT_EQ(combine_kinds.count("trainyard::combine"), 1u);
  EXPECT_EQ(combine_kinds.count("aten::index_add"), 0u);
  const Tensor ref = torch::zeros({3, 16}).index_add(0, ids, y * gates);
  EXPECT_TRUE(torch::allclose(combine.executable->Run({y, gates, ids, torch::zeros({3, 16})}, {})[0], ref));
}

// The reference: one composite SwiGLU FFN per expert on its row block.
Tensor PerExpertReference(const Tensor& x, const std::vector<int64_t>& counts, const std::vector<Tensor>& w) {
  std::vector<Tensor> outs;
  int64_t o = 0;
  for (size_t e = 0; e < counts.size(); o += counts[e], ++e) {
    const Tensor xs = x.narrow(0, o, counts[e]);
    namespace F = torch::nn::functional;
    outs.push_back(F::linear(torch::silu(F::linear(xs, w[0][e])) * F::linear(xs, w[2][e]), w[1][e]));
  }
  return torch::cat(outs, 0);
}

TEST(FusedOperatorsTest, TracedGroupedExpertsRunAnyRowCountWithTheEagerKernel) {
  torch::manual_seed(3);
  const auto params = Params({{3, 24, 16}, {3, 16, 24}, {3, 24, 16}});
  const std::vector<int64_t> traced_counts{4, 0, 3};
  auto traced = Trace(regions::GroupedExpertFfn(), {torch::randn({7, 16}), ops::ExpertStarts(traced_counts)}, params);
  const auto kinds = NodeKinds(traced.executable->graph());
  EXPECT_EQ(kinds.count("trainyard::grouped_experts"), 1u);
  EXPECT_EQ(kinds.size(), 1u) << "only the operator (inputs and params are graph inputs)";

  // Another step: other counts, other row count, same graph.
  const std::vector<int64_t> counts{2, 6, 1};
  const Tensor x = torch::randn({9, 16}), proj = torch::randn({9, 16});
  const Tensor starts = ops::ExpertStarts(counts);
  const Result graph = RunWithGrads(
      [&](const std::vector<Tensor>& in, const std::vector<Tensor>& p) { return traced.executable->Run(in, p); }, x,
      {starts}, params, proj);
  const Result eager = RunWithGrads(regions::GroupedExpertFfn(), x, {starts}, params, proj);
  ExpectIdentical(graph, eager);
  EXPECT_TRUE(torch::allclose(graph.out, PerExpertReference(x, counts, params), 1e-4, 1e-5));
}

TEST(FusedOperatorsTest, SwitchedOffTheOperatorsRunTheirReference) {
  torch::manual_seed(4);
  const auto params = Params({{24, 16}, {16, 24}, {24, 16}});
  struct SwitchedOff {
    SwitchedOff() { fused::SetEnabled(false); }
    ~SwitchedOff() { fused::SetEnabled(true); }  // also when Trace throws
  };
  const Tensor x = torch::randn({5, 16});
  const Tensor proj = torch::randn({5, 16});
  SwitchedOff off;
  auto traced = Trace(regions::Ffn(), {x}, params);
  // The model's graph does not change with the kernel: the same operators.
  const auto kinds = NodeKinds(traced.executable->graph());
  EXPECT_EQ(kinds.at("trainyard::linear"), 2);
  EXPECT_EQ(kinds.at("trainyard::swiglu"), 1);
  // What runs is the reference, written out here as the composite ops themselves.
  auto composite = [](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    namespace F = torch::nn::functional;
    const Tensor h = torch::cat({F::linear(in[0], p[0]), F::linear(in[0], p[2])}, -1);
    return {F::linear(torch::silu(h.narrow(-1, 0, 24)) * h.narrow(-1, 24, 24), p[1])};
  };
  ExpectIdentical(RunWithGrads([&](const std::vector<Tensor>& in,
                                   const std::vector<Tensor>& p) { return traced.executable->Run(in, p); },
                               x, {}, params, proj),
                  RunWithGrads(composite, x, {}, params, proj));
}

TEST(FusedOperatorsTest, InferenceTensorsReachTheCpuKernel) {
  torch::manual_seed(5);
  const Tensor x = torch::randn({4, 16}), w = torch::rand({16});
  const Tensor with_grad_mode = ops::RmsNorm(x, w, 1e-5);
  c10::InferenceMode inference;
  const Tensor xi = x.clone(), wi = w.clone();
  EXPECT_TRUE(torch::equal(ops::RmsNorm(xi, wi, 1e-5), with_grad_mode));
}

TEST(FusedOperatorsTest, GroupedExpertsRefuseMalformedStarts) {
  const Tensor x = torch::randn({6, 16});
  const Tensor w1 = torch::randn({3, 24, 16}), w2 = torch::randn({3, 16, 24});
  auto call = [&](const Tensor& starts) { return ops::GroupedExpertsAtStarts(x, starts, w1, w2, w1); };
  auto expect_error = [&](const Tensor& starts, const std::string& says) {
    try {
      call(starts);
      ADD_FAILURE() << "accepted starts " << starts;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what_without_backtrace()).find(says), std::string::npos) << e.what_without_backtrace();
    }
  };
  const auto i64 = [](std::vector<int64_t> v) { return torch::tensor(v); };
  expect_error(i64({1, 2, 3}), "starts must begin at 0");
  expect_error(i64({0, 4, 2}), "not decrease");
  expect_error(i64({0, 2, 7}), "of 6");
  expect_error(i64({0, 2}), "2 starts for 3 experts");
  expect_error(torch::zeros({3}), "int64");
  EXPECT_EQ(call(i64({0, 2, 6})).sizes(), x.sizes());                       // the last expert may be empty
  EXPECT_THROW(ops::GroupedExperts(x, {2, 3, 0}, w1, w2, w1), c10::Error);  // counts sum to 5, not 6
}

}  // namespace
}  // namespace trainyard::engine
