// The `trainyard` operators through the dispatcher: every operator has its reference
// (CompositeImplicitAutograd, what devices without a kernel of their own run) and its
// CPU kernels; the reference's grouped experts (at::_grouped_mm) equal the per-expert
// loop; and a kernel registered for one more dispatch key is what the unchanged model
// runs.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <gtest/gtest.h>
#include <torch/library.h>
#include <torch/torch.h>

#include <atomic>
#include <string>
#include <vector>

#include "worker/engine/config/engine_config.h"
#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"
#include "worker/engine/kernels/ops.h"
#include "worker/engine/kernels/reference_ops.h"
#include "worker/engine/model/transformer_model.h"

namespace trainyard::engine {
namespace {

using c10::DispatchKey;
using torch::Tensor;

const std::vector<std::string> kOperators = {"causal_attention", "rms_norm",        "linear",
                                             "swiglu",           "grouped_experts", "combine"};

TEST(OpsDispatchTest, EveryOperatorHasItsReferenceAndItsCpuKernels) {
  ops::RmsNorm(torch::ones({1, 2}), torch::ones({2}), 1e-5);  // the library is loaded
  for (const auto& name : kOperators) {
    const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(("trainyard::" + name).c_str(), "");
    EXPECT_TRUE(op.hasKernelForDispatchKey(DispatchKey::CompositeImplicitAutograd)) << name;
    EXPECT_TRUE(op.hasKernelForDispatchKey(DispatchKey::AutogradCPU)) << name;
    EXPECT_TRUE(op.hasKernelForDispatchKey(DispatchKey::CPU)) << name;
    // Devices with no kernel of their own reach the reference.
    EXPECT_FALSE(op.hasKernelForDispatchKey(DispatchKey::CUDA)) << name;
    EXPECT_TRUE(op.hasComputedKernelForDispatchKey(DispatchKey::CUDA)) << name;
  }
  // A device with no kernel of its own runs the reference: here the Meta device (shapes
  // only), where the CPU kernels' raw pointers would have nothing to read.
  const auto meta = torch::TensorOptions().device(torch::kMeta);
  const Tensor x = torch::empty({3, 8}, meta);
  EXPECT_EQ(ops::RmsNorm(x, torch::empty({8}, meta), 1e-5).sizes(), x.sizes());
  EXPECT_EQ(ops::Linear(x, {torch::empty({5, 8}, meta), torch::empty({2, 8}, meta)}).sizes(),
            (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(ops::SwiGlu(torch::empty({3, 10}, meta)).sizes(), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(ops::Combine(x, torch::empty({3, 1}, meta), torch::zeros({3}, torch::kInt64).to(torch::kMeta), 2).sizes(),
            (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(ops::GroupedExperts(x, {1, 0, 2}, torch::empty({3, 16, 8}, meta), torch::empty({3, 8, 16}, meta),
                                torch::empty({3, 16, 8}, meta))
                .sizes(),
            x.sizes());
}

// Row block e of the result: (silu(x_e·w1[e]ᵀ) ⊙ x_e·w3[e]ᵀ)·w2[e]ᵀ, one expert at a time.
Tensor PerExpertLoop(const Tensor& x, const std::vector<int64_t>& counts, const Tensor& w1, const Tensor& w2,
                     const Tensor& w3) {
  namespace F = torch::nn::functional;
  std::vector<Tensor> outs;
  int64_t o = 0;
  for (size_t e = 0; e < counts.size(); o += counts[e], ++e) {
    const Tensor xs = x.narrow(0, o, counts[e]);
    outs.push_back(F::linear(torch::silu(F::linear(xs, w1[e])) * F::linear(xs, w3[e]), w2[e]));
  }
  return torch::cat(outs, 0);
}

// The grouped path (the fused CPU kernel, and the reference's at::_grouped_mm form that
// bf16 CUDA runs, here on LibTorch's CPU fallback) and the reference's named fallback
// against an independent per-expert loop: forward and
// the gradients of x and of every weight, uneven counts with empty experts (first,
// middle, last) and a step in which no expert gets a row.
TEST(OpsDispatchTest, GroupedExpertsEqualThePerExpertLoop) {
  const int64_t dim = 24, hidden = 40;
  for (const std::vector<int64_t>& counts : std::vector<std::vector<int64_t>>{
           {0, 13, 0, 1, 7, 0}, {3, 3, 3, 3, 3, 3}, {17, 0, 0, 0, 0, 2}, {0, 0, 0, 0, 0, 0}}) {
    for (const char* path : {"fused", "loop", "grouped_mm"}) {
      torch::manual_seed(11);
      int64_t rows = 0;
      for (int64_t c : counts) rows += c;
      const int64_t e = static_cast<int64_t>(counts.size());
      const Tensor x0 = torch::randn({rows, dim});
      const Tensor proj = torch::randn({rows, dim});
      const std::vector<Tensor> w0 = {torch::randn({e, hidden, dim}) * 0.2, torch::randn({e, dim, hidden}) * 0.2,
                                      torch::randn({e, hidden, dim}) * 0.2};
      auto run = [&](auto&& fn) {
        Tensor x = x0.clone().requires_grad_(true);
        std::vector<Tensor> w;
        for (const auto& t : w0) w.push_back(t.clone().requires_grad_(true));
        Tensor out = fn(x, w);
        (out * proj).sum().backward();
        std::vector<Tensor> r = {out.detach(), x.grad()};
        for (const auto& t : w) r.push_back(t.grad().defined() ? t.grad() : torch::zeros_like(t));
        return r;
      };
      const std::string p = path;
      const auto grouped = run([&](const Tensor& x, const std::vector<Tensor>& w) {
        if (p == "fused") return ops::GroupedExperts(x, counts, w[0], w[1], w[2]);
        const Tensor starts = ops::ExpertStarts(counts);
        return p == "loop" ? reference::GroupedExpertsLoop(x, starts, w[0], w[1], w[2])
                           : reference::GroupedExpertsGemm(x, starts, w[0], w[1], w[2]);
      });
      const auto loop = run([&](const Tensor& x, const std::vector<Tensor>& w) {
        return rows == 0 ? x * 0 : PerExpertLoop(x, counts, w[0], w[1], w[2]);
      });
      const char* names[] = {"out", "dx", "dw1", "dw2", "dw3"};
      for (size_t i = 0; i < loop.size(); ++i) {
        ASSERT_EQ(grouped[i].sizes(), loop[i].sizes()) << names[i];
        if (loop[i].numel() == 0) continue;
        const double scale = std::max(1.0, loop[i].abs().max().template item<double>());
        EXPECT_LE((grouped[i] - loop[i]).abs().max().template item<double>(), 1e-6 * scale)
            << names[i] << " (" << path << ") counts " << ::testing::PrintToString(counts);
      }
    }
  }
}

// A kernel for trainyard::rms_norm at one more dispatch key (LibTorch's test-only mode
// key, which sits above autograd): it counts its calls and returns twice the CPU
// kernel's result. The unchanged model must run it at every norm, which is the same as
// running the CPU kernel with every norm weight doubled.
std::atomic<int> g_fake_calls{0};

Tensor FakeRmsNorm(const Tensor& x, const Tensor& weight, double eps) {
  ++g_fake_calls;
  c10::impl::ExcludeDispatchKeyGuard below(DispatchKey::TESTING_ONLY_GenericMode);
  return ops::RmsNorm(x, weight, eps) * 2;
}

TEST(OpsDispatchTest, AFakeBackendKernelIsWhatTheUnchangedModelRuns) {
  const ModelConfig c = TinyEngineConfig().model;
  TransformerModel model(c, 32), doubled(c, 32);
  model->InitWeights(3);
  doubled->InitWeights(3);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : doubled->named_parameters()) {
      const std::string& name = p.key();
      if (name.size() >= 12 && name.compare(name.size() - 12, 12, "_norm.weight") == 0) p.value().mul_(2);
      if (name == "norm.weight") p.value().mul_(2);
    }
  }
  const Tensor tokens = torch::randint(0, c.vocab_size, {2, 16}, torch::kInt64);
  const Tensor targets = torch::randint(0, c.vocab_size, {2, 16}, torch::kInt64);
  const double plain = model(tokens, targets).loss.item<double>();
  const double expected = doubled(tokens, targets).loss.item<double>();
  ASSERT_GT(std::abs(plain - expected), 1e-3) << "doubling the norms must change the loss";

  double faked = 0;
  {
    torch::Library fallthrough(torch::Library::IMPL, "_", DispatchKey::TESTING_ONLY_GenericMode, __FILE__, __LINE__);
    if (!c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(DispatchKey::TESTING_ONLY_GenericMode)) {
      fallthrough.fallback(torch::CppFunction::makeFallthrough());
    }
    torch::Library fake(torch::Library::IMPL, "trainyard", DispatchKey::TESTING_ONLY_GenericMode, __FILE__, __LINE__);
    fake.impl("rms_norm", &FakeRmsNorm);
    c10::impl::IncludeDispatchKeyGuard mode(DispatchKey::TESTING_ONLY_GenericMode);
    g_fake_calls = 0;
    const Tensor loss = model(tokens, targets).loss;
    loss.backward();  // the backward runs through the fake kernel's result too
    faked = loss.item<double>();
  }
  EXPECT_EQ(g_fake_calls.load(), 2 * c.n_layers + 1) << "every block's two norms and the final norm";
  EXPECT_NEAR(faked, expected, 1e-6 * std::abs(expected));
  // With the registration gone, the CPU kernel again.
  EXPECT_EQ(model(tokens, targets).loss.item<double>(), plain);
}

}  // namespace
}  // namespace trainyard::engine
