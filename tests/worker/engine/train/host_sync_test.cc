// Host synchronisations of a training step: the watcher counts the operators that read
// device data on the host outside a declared HostRead, and a step of the tiny MoE model
// reads exactly at its declared sites (one dispatch read per MoE layer, the gradient
// norm, the loss head, the expert load), nowhere else.
#include "worker/engine/base/host_sync.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <map>
#include <string>

#include "tests/worker/engine/trainer_harness.h"
#include "worker/engine/config/engine_config.h"

namespace trainyard::engine {
namespace {

TEST(HostSyncTest, TheWatcherCountsHostReadsOutsideADeclaredScope) {
  UndeclaredHostReads watch;
  const torch::Tensor x = torch::tensor({0.0f, 2.0f, 0.0f, 3.0f});
  (void)x.sum().item<float>();
  (void)torch::nonzero(x);
  (void)torch::equal(x, x);
  {
    HostRead read("test");
    (void)x.max().item<float>();  // declared: not counted
    (void)torch::nonzero(x);
  }
  (void)(x * 2);  // no host read
  const auto counts = watch.Counts();
  EXPECT_EQ(counts, (std::map<std::string, int64_t>{
                        {"aten::_local_scalar_dense", 1}, {"aten::nonzero", 1}, {"aten::equal", 1}}));
  EXPECT_GE(HostReadsBySite().at("test"), 1);
}

std::map<std::string, int64_t> Minus(std::map<std::string, int64_t> a, const std::map<std::string, int64_t>& b) {
  for (const auto& [site, n] : b) a[site] -= n;
  for (auto it = a.begin(); it != a.end();) it = it->second == 0 ? a.erase(it) : std::next(it);
  return a;
}

void ExpectStepsReadOnlyWhereDeclared(EngineConfig c) {
  testing::OneRankTrainer trainer(c);
  trainer.Step(1);  // the first step traces and probes its regions
  const auto before = HostReadsBySite();
  UndeclaredHostReads watch;
  constexpr int kSteps = 3;
  for (int s = 2; s < 2 + kSteps; ++s) trainer.Step(s);
  EXPECT_EQ(watch.Counts(), (std::map<std::string, int64_t>{})) << "a host read outside a HostRead scope";
  const int64_t moe_layers = c.model.n_moe_layers();
  ASSERT_GT(moe_layers, 0);
  const auto sites = Minus(HostReadsBySite(), before);
  int64_t total = 0;
  for (const auto& [site, n] : sites) total += n;
  std::printf("[figures] host syncs per step (%s %s, %lld MoE layer(s)): %.2f\n", c.compile.backend.c_str(),
              c.training.mixed_precision.c_str(), static_cast<long long>(moe_layers),
              static_cast<double>(total) / kSteps);
  EXPECT_EQ(sites, (std::map<std::string, int64_t>{
                       {"moe dispatch: tokens per expert", moe_layers * kSteps},
                       {"gradient norm", kSteps},
                       {"step loss and checkpoint request", kSteps},
                       {"expert load metrics", kSteps},
                   }));
}

TEST(HostSyncTest, ATrainingStepReadsTheHostOnlyAtItsDeclaredSites) {
  ExpectStepsReadOnlyWhereDeclared(TinyEngineConfig());
}

TEST(HostSyncTest, SoDoesTheDebugPresetsStep) {
  ExpectStepsReadOnlyWhereDeclared(PresetJob("debug", {"training.steps=8"}));
}

TEST(HostSyncTest, SoDoesAJitCompiledBf16Step) {
  EngineConfig c = TinyEngineConfig();
  c.compile.backend = "jit";
  c.training.mixed_precision = "bf16";
  ExpectStepsReadOnlyWhereDeclared(c);
}

}  // namespace
}  // namespace trainyard::engine
