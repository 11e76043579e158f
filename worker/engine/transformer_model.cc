#include "worker/engine/transformer_model.h"

#include <cmath>
#include <string>

#include "worker/engine/parameter_sharding.h"

namespace trainyard::engine {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TransformerModelImpl::TransformerModelImpl(const ModelConfig& c, int64_t max_seq_len,
                                           ParallelContext ctx)
    : config_(c), ctx_(ctx), rope_(c.head_dim(), max_seq_len, c.rope_theta) {
  tok_embeddings = register_module("tok_embeddings", torch::nn::Embedding(c.vocab_size, c.dim));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < c.n_layers; ++i) {
    blocks_.push_back(TransformerBlock(c, /*use_moe=*/i >= c.n_dense_layers, ctx));
    layers->push_back(blocks_.back());
  }
  norm = register_module("norm", RMSNorm(c.dim, c.norm_eps));
  output = register_module("output", torch::nn::Linear(torch::nn::LinearOptions(c.dim, c.vocab_size).bias(false)));
}

ModelOutput TransformerModelImpl::forward(const torch::Tensor& tokens) {
  auto h = tok_embeddings(tokens);
  std::vector<torch::Tensor> counts;
  for (auto& block : blocks_) {
    BlockOutput b = block(h, rope_);
    h = b.out;
    if (b.tokens_per_expert.defined()) counts.push_back(b.tokens_per_expert);
  }
  auto logits = output(norm(h));
  auto stacked = counts.empty() ? torch::zeros({0, config_.n_routed_experts}, torch::kInt64)
                                : torch::stack(counts);
  return {logits, stacked};
}

void TransformerModelImpl::InitWeights(std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  // A private generator: other code touching the global RNG cannot shift the init.
  auto gen = at::detail::createCPUGenerator(seed);
  const double std = 0.02;
  const double out_std = std / std::sqrt(2.0 * config_.n_layers);
  for (auto& item : named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    if (EndsWith(name, "norm.weight")) {
      p.fill_(1.0);
      continue;
    }
    const ShardKind kind = ShardKindOf(name);
    auto full = torch::empty(FullShape(kind, p.sizes(), ctx_), p.options());
    if (EndsWith(name, ".wo.weight") || EndsWith(name, ".w2.weight") ||
        EndsWith(name, ".experts.w2") || name == "output.weight") {
      full.normal_(0.0, out_std, gen);
    } else {
      full.normal_(0.0, std, gen);
    }
    p.copy_(TakeShard(full, kind, ctx_));
  }
  for (auto& item : named_buffers(/*recurse=*/true)) item.value().zero_();
}

void TransformerModelImpl::UpdateExpertBiases(const torch::Tensor& counts, double coeff) {
  int64_t row = 0;
  for (auto& block : blocks_) {
    if (!block->is_moe()) continue;
    block->moe->UpdateExpertBias(counts[row++], coeff);
  }
}

}  // namespace trainyard::engine
