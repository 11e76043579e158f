#include "worker/engine/model/transformer_model.h"

#include <cmath>
#include <string>

#include "worker/engine/compile/activation_checkpoint.h"
#include "worker/engine/model/regions/projection.h"
#include "worker/engine/parallel/parameter_sharding.h"

namespace trainyard::engine {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TransformerModelImpl::TransformerModelImpl(const ModelConfig& c, int64_t max_seq_len, ParallelContext ctx,
                                           ModelOptions options)
    : config_(c),
      ctx_(ctx),
      rope_(c.rope_head_dim(), max_seq_len, c.rope_theta,
            YarnScaling{c.rope_factor, c.original_seq_len, c.beta_fast, c.beta_slow}),
      full_checkpoint_(options.activation_checkpoint == "full"),
      compute_dtype_(options.compute_dtype) {
  TORCH_CHECK(compute_dtype_ == torch::kFloat || compute_dtype_ == torch::kBFloat16,
              "model: the compute dtype must be float32 or bfloat16, not ", compute_dtype_);
  TORCH_CHECK(options.activation_checkpoint == "none" || options.activation_checkpoint == "full" ||
                  options.activation_checkpoint == "selective",
              "activation_checkpoint.mode=", options.activation_checkpoint, " must be none, full or selective");
  RegionFactory& regions = options.regions ? *options.regions : EagerRegionFactory();
  const bool selective = options.activation_checkpoint == "selective";
  tok_embeddings = register_module("tok_embeddings", torch::nn::Embedding(c.vocab_size, c.dim));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < c.n_layers; ++i) {
    const bool use_moe = i >= c.n_dense_layers;
    blocks_.push_back(TransformerBlock(c, use_moe, ctx, regions, i, selective,
                                       options.plant_side_effect && i == c.n_dense_layers,
                                       options.regions_granularity == "model"));
    layers->push_back(blocks_.back());
  }
  norm = register_module("norm", RMSNorm(c.dim, c.norm_eps));  // eager: only for logits
  output = register_module("output", torch::nn::Linear(torch::nn::LinearOptions(c.dim, c.vocab_size).bias(false)));
  loss_region_ = regions.Make(regions::LossKey(c.dim, c.vocab_size, c.norm_eps), regions::Loss(c.norm_eps), -1);
}

ModelOutput TransformerModelImpl::forward(const torch::Tensor& tokens, const torch::Tensor& targets) {
  if (before_unit_) before_unit_(0);
  auto h = tok_embeddings(tokens);
  // Mixed precision: the residual stream, and so every region, runs in the compute
  // dtype; the regions cast the fp32 weights to it (regions/projection.h).
  if (h.scalar_type() != compute_dtype_) h = h.to(compute_dtype_);
  std::vector<torch::Tensor> counts, dropped;
  int unit = 0;
  for (auto& block : blocks_) {
    if (before_unit_) before_unit_(++unit);
    BlockOutput b;
    if (full_checkpoint_ && torch::GradMode::is_enabled()) {
      // The block's activations are recomputed in backward; its counts come from this
      // forward only.
      auto out = compile::Checkpointed(
          [&block, this](const std::vector<torch::Tensor>& in) -> std::vector<torch::Tensor> {
            BlockOutput r = block(in[0], rope_);
            if (r.dropped.defined()) return {r.out, r.tokens_per_expert, r.dropped};
            if (r.tokens_per_expert.defined()) return {r.out, r.tokens_per_expert};
            return {r.out};
          },
          {h});
      b.out = out[0];
      if (out.size() > 1) b.tokens_per_expert = out[1];
      if (out.size() > 2) b.dropped = out[2];
    } else {
      b = block(h, rope_);
    }
    h = b.out;
    if (b.tokens_per_expert.defined()) counts.push_back(b.tokens_per_expert);
    if (b.dropped.defined()) dropped.push_back(b.dropped);
  }
  if (before_unit_) before_unit_(unit + 1);
  ModelOutput result;
  if (targets.defined()) {
    result.loss = loss_region_({h, targets}, {norm->weight, output->weight})[0];
  } else {
    auto normed = norm(h);
    result.logits =
        torch::nn::functional::linear(normed, regions::AsComputeType(output->weight, normed)).to(torch::kFloat);
  }
  result.tokens_per_expert = counts.empty()
                                 ? torch::zeros({0, config_.n_routed_experts}, tokens.options().dtype(torch::kInt64))
                                 : torch::stack(counts);
  result.dropped_tokens =
      dropped.empty() ? torch::zeros({}, tokens.options().dtype(torch::kInt64)) : torch::stack(dropped).sum();
  return result;
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
    // Drawn on the host from the host generator whatever the parameter's device, so a
    // CUDA model starts from exactly the CPU model's weights.
    auto full = torch::empty(FullShape(kind, p.sizes(), ctx_), p.options().device(torch::kCPU));
    if (EndsWith(name, ".wo.weight") || EndsWith(name, ".w2.weight") || EndsWith(name, ".experts.w2") ||
        name == "output.weight") {
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

namespace regions {

using compile::RegionFn;
using compile::RegionKey;
using torch::Tensor;

namespace F = torch::nn::functional;

RegionKey LossKey(int64_t dim, int64_t vocab, double eps) {
  return RegionKey("loss", {{"dim", dim}, {"vocab", vocab}, {"eps", eps}});
}

RegionFn Loss(double eps) {
  return [eps](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    const Tensor& h = in[0];
    auto normed = Normalize(h, p[0], eps);
    auto logits = Project(normed, {p[1]});
    if (IsReducedPrecision(logits)) logits = logits.to(torch::kFloat);  // the loss in fp32
    return {F::cross_entropy(logits.reshape({-1, logits.size(-1)}), in[1].reshape({-1}))};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
