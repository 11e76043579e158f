// The small MoE layer the model and expert-parallel tests build (8 wide, 4 routed
// experts, top-2, one shared expert), its random and hand-set routers, and the
// references those tests compare it with: the routing by a plain loop and every expert
// run on every token, weighted by the gates.
// Header-only: the tests that include it are in one binary (engine_tests).
#pragma once

#include <torch/torch.h>

#include <string>

#include "worker/engine/config/engine_config.h"
#include "worker/engine/model/moe/moe_layer.h"

namespace trainyard::engine::testing {

inline ModelConfig SmallMoEConfig(const std::string& score_func = "sigmoid", double capacity_factor = 0) {
  ModelConfig c = TinyEngineConfig().model;
  c.dim = 8;
  c.n_routed_experts = 4;
  c.top_k = 2;
  c.expert_hidden = 6;
  c.n_shared_experts = 1;
  c.score_func = score_func;
  c.route_scale = 1.5;
  c.capacity_factor = capacity_factor;
  return c;
}

// Every parameter drawn from N(0, 0.5²) after manual_seed(seed), and an uneven expert
// bias, so the bias takes part in the routing.
inline void RandomInitSmallMoE(MoE& moe, int seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard g;
  for (auto& p : moe->parameters()) p.normal_(0, 0.5);
  moe->expert_bias.copy_(torch::tensor({0.3f, -0.2f, 0.0f, 0.1f}));
}

// Gate row e picks feature e (weight 4·I, zero bias): a one-hot token j scores highest
// on expert j, so a routing can be worked out by hand. Needs dim 4.
inline void SetOneHotRouter(MoE& moe) {
  torch::NoGradGuard g;
  moe->router->gate->weight.copy_(torch::eye(4) * 4.0);
  moe->expert_bias.zero_();
}

// The router's decision computed plainly for tokens x [n, dim]: per token the top-k of
// the biased scores by repeated argmax (another algorithm than torch::topk).
struct HandGates {
  torch::Tensor mask;   // [n, E]: 1 on each token's top-k
  torch::Tensor gates;  // [n, E]: the scores there, normalised, scaled; zero elsewhere; with grad
};

inline HandGates GateByHand(MoE& moe, const torch::Tensor& x, const ModelConfig& c) {
  auto logits = torch::matmul(x, moe->router->gate->weight.t());
  auto scores = c.score_func == "softmax" ? torch::softmax(logits, -1) : torch::sigmoid(logits);
  const int64_t n = x.size(0), experts = c.n_routed_experts;
  auto biased = (scores + moe->expert_bias).detach();
  HandGates h;
  h.mask = torch::zeros({n, experts});
  for (int64_t t = 0; t < n; ++t) {
    auto row = biased[t].clone();
    for (int k = 0; k < c.top_k; ++k) {
      const int64_t best = row.argmax().item<int64_t>();
      h.mask[t][best] = 1;
      row[best] = -1e9;
    }
  }
  h.gates = scores * h.mask;
  if (c.route_norm) h.gates = h.gates / h.gates.sum(-1, true);
  h.gates = h.gates * c.route_scale;
  return h;
}

// Every routed expert on every token of x [n, dim], weighted by gates [n, E], plus the
// shared expert.
inline torch::Tensor AllExpertsReference(MoE& moe, const torch::Tensor& x, const torch::Tensor& gates) {
  auto out = torch::zeros_like(x);
  for (int64_t e = 0; e < gates.size(1); ++e) {
    auto w1 = moe->experts->w1[e], w2 = moe->experts->w2[e], w3 = moe->experts->w3[e];
    auto y = torch::matmul(torch::silu(torch::matmul(x, w1.t())) * torch::matmul(x, w3.t()), w2.t());
    out = out + y * gates.select(1, e).unsqueeze(1);
  }
  auto sh = moe->shared_experts;
  return out + sh->w2(torch::silu(sh->w1(x)) * sh->w3(x));
}

}  // namespace trainyard::engine::testing
