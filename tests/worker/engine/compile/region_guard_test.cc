#include "worker/engine/compile/region/region_guard.h"

#include <gtest/gtest.h>

namespace trainyard::engine::compile {
namespace {

using Tensors = std::vector<torch::Tensor>;

// A realistic region signature: 3 inputs, 3 params.
struct Signature {
  Tensors inputs{torch::zeros({4096, 64}).requires_grad_(), torch::zeros({4096, 64}), torch::zeros({64})};
  Tensors params{torch::zeros({64}).requires_grad_(), torch::zeros({128, 64}).requires_grad_(),
                 torch::zeros({64, 128}).requires_grad_()};
};

TEST(GuardSetTest, SameStructureWithOtherValuesPasses) {
  Signature s;
  const GuardSet g = GuardSet::Capture(s.inputs, s.params, /*grad_mode=*/true);
  Signature t;
  for (auto& x : t.inputs) x = x.detach().fill_(3).requires_grad_(x.requires_grad());
  EXPECT_TRUE(g.Matches(t.inputs, t.params, true));
  EXPECT_EQ(g.Check(t.inputs, t.params, true), std::nullopt);
}

TEST(GuardSetTest, DescribesSizeAndDim) {
  Signature s;
  const GuardSet g = GuardSet::Capture(s.inputs, s.params, true);
  s.inputs[0] = torch::zeros({4160, 64}).requires_grad_();
  EXPECT_FALSE(g.Matches(s.inputs, s.params, true));
  EXPECT_EQ(g.Check(s.inputs, s.params, true), "input[0].size(0): expected 4096, got 4160");
  s.inputs[0] = torch::zeros({2, 2048, 64}).requires_grad_();
  EXPECT_EQ(g.Check(s.inputs, s.params, true), "input[0].dim(): expected 2, got 3");
  s.inputs[0] = torch::zeros({4096, 64}).requires_grad_();
  s.params[1] = torch::zeros({128, 32}).requires_grad_();
  EXPECT_EQ(g.Check(s.inputs, s.params, true), "param[1].size(1): expected 64, got 32");
}

TEST(GuardSetTest, DescribesDtypeRequiresGradAndGradMode) {
  Signature s;
  const GuardSet g = GuardSet::Capture(s.inputs, s.params, true);
  Signature d;
  d.params[2] = torch::zeros({64, 128}, torch::kFloat64).requires_grad_();
  EXPECT_EQ(g.Check(d.inputs, d.params, true), "param[2].dtype: expected Float, got Double");
  Signature r;
  r.inputs[1].requires_grad_();
  EXPECT_EQ(g.Check(r.inputs, r.params, true), "input[1].requires_grad: expected false, got true");
  Signature m;
  EXPECT_FALSE(g.Matches(m.inputs, m.params, false));
  EXPECT_EQ(g.Check(m.inputs, m.params, false), "grad_mode: expected true, got false");
}

TEST(GuardSetTest, DescribesCountsAndUndefinedTensors) {
  Signature s;
  const GuardSet g = GuardSet::Capture(s.inputs, s.params, true);
  Signature c;
  c.inputs.pop_back();
  EXPECT_EQ(g.Check(c.inputs, c.params, true), "input count: expected 3, got 2");
  Signature p;
  p.params.push_back(torch::zeros({1}));
  EXPECT_EQ(g.Check(p.inputs, p.params, true), "param count: expected 3, got 4");
  Signature u;
  u.inputs[2] = torch::Tensor();
  EXPECT_FALSE(g.Matches(u.inputs, u.params, true));
  EXPECT_EQ(g.Check(u.inputs, u.params, true), "input[2]: expected a defined tensor, got an undefined one");
  EXPECT_THROW(GuardSet::Capture(u.inputs, u.params, true), std::invalid_argument);
}

TEST(GuardSetTest, FailuresListsEveryFailingGuardInOrder) {
  Signature s;
  const GuardSet g = GuardSet::Capture(s.inputs, s.params, true);
  Signature t;
  t.inputs[0] = torch::zeros({8, 32}, torch::kFloat64);
  t.params[0] = torch::zeros({64});
  const std::vector<std::string> expected{
      "grad_mode: expected true, got false",
      "input[0].size(0): expected 4096, got 8",
      "input[0].size(1): expected 64, got 32",
      "input[0].dtype: expected Float, got Double",
      "input[0].requires_grad: expected true, got false",
      "param[0].requires_grad: expected true, got false",
  };
  EXPECT_EQ(g.Failures(t.inputs, t.params, false), expected);
}

TEST(GuardSetTest, ToStringNamesWhatWasCompiled) {
  const GuardSet g =
      GuardSet::Capture({torch::zeros({4, 16}).requires_grad_()}, {torch::zeros({16}, torch::kInt64)}, false);
  EXPECT_EQ(g.ToString(), "grad_mode=false input[0]=Float[4, 16] cpu requires_grad param[0]=Long[16] cpu");
}

}  // namespace
}  // namespace trainyard::engine::compile
