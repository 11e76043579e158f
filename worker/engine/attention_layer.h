// Causal grouped-query self-attention with RoPE. Query head h reads KV head
// h / (n_heads / n_kv_heads); scores scale by 1/sqrt(head_dim). Linear layers have no
// bias. Not thread-safe (a torch module); owned by its TransformerBlock.
#pragma once

#include <torch/torch.h>

#include "worker/engine/rotary_embedding.h"

namespace trainyard::engine {

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t dim, int64_t n_heads, int64_t n_kv_heads);

  // x: [batch, seq, dim] -> [batch, seq, dim].
  torch::Tensor forward(const torch::Tensor& x, const RotaryEmbedding& rope);

  torch::nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};

 private:
  int64_t n_heads_;
  int64_t n_kv_heads_;
  int64_t head_dim_;
};
TORCH_MODULE(Attention);

}  // namespace trainyard::engine
