#include "worker/engine/model/transformer_model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <string>

#include "common/spec/memory_estimate.h"
#include "common/spec/presets.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/parallel/parameter_sharding.h"
#include "worker/engine/train/flops_model.h"

namespace trainyard::engine {
namespace {

TEST(TransformerModelTest, ParameterNamesFollowTorchtitan) {
  const ModelConfig c = TinyEngineConfig().model;
  TransformerModel model(c, 32);
  std::vector<std::string> names;
  for (auto& p : model->named_parameters()) names.push_back(p.key());
  const std::vector<std::string> expected = {
      "tok_embeddings.weight",
      "layers.0.attention_norm.weight",
      "layers.0.attention.wq.weight",
      "layers.0.attention.wk.weight",
      "layers.0.attention.wv.weight",
      "layers.0.attention.wo.weight",
      "layers.0.ffn_norm.weight",
      "layers.0.feed_forward.w1.weight",
      "layers.0.feed_forward.w2.weight",
      "layers.0.feed_forward.w3.weight",
      "layers.1.attention_norm.weight",
      "layers.1.attention.wq.weight",
      "layers.1.attention.wk.weight",
      "layers.1.attention.wv.weight",
      "layers.1.attention.wo.weight",
      "layers.1.ffn_norm.weight",
      "layers.1.moe.router.gate.weight",
      "layers.1.moe.experts.w1",
      "layers.1.moe.experts.w2",
      "layers.1.moe.experts.w3",
      "layers.1.moe.shared_experts.w1.weight",
      "layers.1.moe.shared_experts.w2.weight",
      "layers.1.moe.shared_experts.w3.weight",
      "norm.weight",
      "output.weight",
  };
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), std::set<std::string>(expected.begin(), expected.end()));
  EXPECT_EQ(names.size(), expected.size());

  std::vector<std::string> buffers;
  for (auto& b : model->named_buffers()) buffers.push_back(b.key());
  EXPECT_EQ(buffers, std::vector<std::string>{"layers.1.moe.expert_bias"});

  auto params = model->named_parameters();
  EXPECT_EQ(params["layers.1.moe.experts.w1"].sizes(), (std::vector<int64_t>{4, 32, 64}));
  EXPECT_EQ(params["layers.1.moe.experts.w2"].sizes(), (std::vector<int64_t>{4, 64, 32}));
  EXPECT_EQ(params["layers.0.attention.wk.weight"].sizes(), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(params["layers.1.moe.shared_experts.w1.weight"].sizes(), (std::vector<int64_t>{32, 64}));

  // The analytic count must agree with the real module.
  int64_t total = 0;
  for (auto& p : model->parameters()) total += p.numel();
  EXPECT_EQ(FlopsModel::FromConfig(c, 32).total_params, total);
  // So must the controller's admission estimate (common/spec, no torch), and on one
  // rank (tp = ep = 1) the rank holds all of it, at 16 bytes each with AdamW.
  spec::JobSpec js;
  js.model.vocab_size = c.vocab_size;
  js.model.dim = c.dim;
  js.model.n_layers = c.n_layers;
  js.model.n_dense_layers = c.n_dense_layers;
  js.model.n_heads = c.n_heads;
  js.model.n_kv_heads = c.n_kv_heads;
  js.model.ffn_hidden = c.ffn_hidden;
  js.model.n_routed_experts = c.n_routed_experts;
  js.model.top_k = c.top_k;
  js.model.n_shared_experts = c.n_shared_experts;
  js.model.expert_hidden = c.expert_hidden;
  const spec::MemoryEstimate estimate = spec::EstimateRankMemory(js);
  EXPECT_EQ(estimate.total_params, static_cast<double>(total));
  EXPECT_EQ(estimate.rank_params, static_cast<double>(total));
  EXPECT_EQ(estimate.state_bytes, 16.0 * total);
}

// The parallelism plan is a table of exact names: every tensor the model has is in it
// with the split docs/parallelism.md gives, and a name it does not list is refused,
// never left replicated by default.
TEST(ParallelPlanTest, EveryModelTensorIsPlannedAndAnUnknownNameIsRefused) {
  // Every architecture's tensors, the latent attention's with and without its low-rank
  // query.
  for (const char* preset : {"tiny", "deepseek_v3_debug", "qwen3_moe_debug"}) {
    for (int q_lora_rank : {0, 16}) {
      auto spec = spec::FromPreset(preset);
      ASSERT_TRUE(spec.ok()) << preset;
      ModelConfig c = spec.value().model;
      if (c.mla()) c.q_lora_rank = q_lora_rank;
      TransformerModel model(c, 32);
      for (auto& p : model->named_parameters()) EXPECT_NO_THROW(ShardKindOf(p.key())) << p.key();
      for (auto& b : model->named_buffers()) EXPECT_NO_THROW(ShardKindOf(b.key())) << b.key();
    }
  }
  EXPECT_EQ(ShardKindOf("layers.1.attention.wq_a.weight"), ShardKind::kTpPartial);
  EXPECT_EQ(ShardKindOf("layers.1.attention.wkv_b.weight"), ShardKind::kColumn);
  EXPECT_EQ(ShardKindOf("layers.1.attention.k_norm.weight"), ShardKind::kTpPartial);
  EXPECT_EQ(ShardKindOf("layers.12.attention.wk.weight"), ShardKind::kColumn);
  EXPECT_EQ(ShardKindOf("layers.0.attention.wo.weight"), ShardKind::kRow);
  EXPECT_EQ(ShardKindOf("layers.3.moe.shared_experts.w2.weight"), ShardKind::kRow);
  EXPECT_EQ(ShardKindOf("layers.3.moe.experts.w2"), ShardKind::kExpert);
  EXPECT_EQ(ShardKindOf("layers.3.moe.router.gate.weight"), ShardKind::kTpPartial);
  EXPECT_EQ(ShardKindOf("layers.3.moe.expert_bias"), ShardKind::kReplicated);
  EXPECT_EQ(ShardKindOf("output.weight"), ShardKind::kReplicated);
  // A new projection (a fused q|k|v weight, a bias), a layer without an index, a layer
  // entry at the top, a suffix match of a planned name: all refused.
  for (const char* unknown :
       {"layers.0.attention.wqkv.weight", "layers.0.attention.wq_a.bias", "layers.x.attention.wq.weight",
        "layers..attention.wq.weight", "attention.wq.weight", "layers.0.attention.wq.weight.extra",
        "model.layers.0.attention.wq.weight", "", "layers.0"}) {
    try {
      ShardKindOf(unknown);
      ADD_FAILURE() << "planned: " << unknown;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + unknown + "\""), std::string::npos) << e.what();
    }
  }
}

TEST(TransformerModelTest, InitDependsOnlyOnSeed) {
  const ModelConfig c = TinyEngineConfig().model;
  TransformerModel a(c, 32), b(c, 32), d(c, 32);
  a->InitWeights(7);
  torch::manual_seed(12345);  // the global RNG must not matter
  b->InitWeights(7);
  d->InitWeights(8);
  auto pa = a->named_parameters(), pb = b->named_parameters(), pd = d->named_parameters();
  for (auto& item : pa) {
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  }
  EXPECT_FALSE(torch::equal(pa["output.weight"], pd["output.weight"]));
  EXPECT_TRUE(torch::equal(pa["norm.weight"], torch::ones({64})));
  // Residual projections are scaled down by 1/sqrt(2·n_layers) = 0.5.
  const double wq_std = pa["layers.0.attention.wq.weight"].std().item<double>();
  const double wo_std = pa["layers.0.attention.wo.weight"].std().item<double>();
  EXPECT_NEAR(wq_std, 0.02, 0.003);
  EXPECT_NEAR(wo_std, 0.01, 0.0015);
}

TEST(TransformerModelTest, ForwardShapesAndRoutingCounts) {
  EngineConfig cfg = TinyEngineConfig();
  TransformerModel model(cfg.model, 32);
  model->InitWeights(1);
  auto tokens = torch::randint(0, 256, {3, 16}, torch::kInt64);
  ModelOutput out = model(tokens);
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{3, 16, 256}));
  EXPECT_EQ(out.tokens_per_expert.sizes(), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(out.tokens_per_expert.sum().item<int64_t>(), 3 * 16 * 2);
  // Forward must not write module state (the bias moves only in UpdateExpertBiases).
  EXPECT_TRUE(torch::equal(model->named_buffers()["layers.1.moe.expert_bias"], torch::zeros({4})));
}

}  // namespace
}  // namespace trainyard::engine
