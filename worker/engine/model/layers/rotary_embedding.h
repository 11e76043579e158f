// RoPE tables and application in the Llama/torchtitan layout: consecutive pairs
// (2i, 2i+1) of each head rotate by angle pos·theta^(-2i/head_dim).
// Immutable after construction; safe to share across threads.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace trainyard::engine {

// YaRN's frequency interpolation (DeepSeek-V3, HF's "yarn" rope type): each frequency
// blends its interpolated value theta_i/factor and the original by a linear ramp over
// the dimensions whose wavelength, at original_seq_len positions, turns between
// beta_slow and beta_fast times (bounds floored and ceiled). factor <= 1: plain RoPE.
struct YarnScaling {
  double factor = 1.0;
  int64_t original_seq_len = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

class RotaryEmbedding {
 public:
  RotaryEmbedding(int64_t head_dim, int64_t max_seq_len, double theta, const YarnScaling& yarn = {});

  // The head_dim/2 inverse frequencies (double): theta^(-2i/head_dim), YaRN-blended.
  static torch::Tensor InverseFrequencies(int64_t head_dim, double theta, const YarnScaling& yarn);

  // x: [batch, seq, heads, head_dim] -> same shape, rotated. seq <= max_seq_len.
  torch::Tensor Apply(const torch::Tensor& x) const;

  // The per-element tables for positions [0, seq): [seq, head_dim], cos as (c, c)
  // pairs and sin as (-s, s) pairs. Throws if seq exceeds max_seq_len.
  torch::Tensor CosTable(int64_t seq) const;
  torch::Tensor SinTable(int64_t seq) const;
  // Rotates x [batch, seq, heads, head_dim] with tables from CosTable/SinTable: a pure
  // function, so compiled regions receive the tables as inputs.
  static torch::Tensor Rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

  const torch::Tensor& cos() const { return cos_; }  // [max_seq_len, head_dim/2]
  const torch::Tensor& sin() const { return sin_; }

 private:
  torch::Tensor cos_;
  torch::Tensor sin_;
  // Per-element tables [max_seq_len, head_dim]: cos interleaved (c, c) and sin as (-s, s),
  // so Apply is x·cos + swap_pairs(x)·sin.
  torch::Tensor cos_full_;
  torch::Tensor sin_full_;
};

// The cos/sin tables of positions [0, t) that an attention region takes as inputs: fp32
// (RoPE rotates in fp32 whatever the activations' dtype) on the activations' device,
// never written in place, rebuilt only when t or the device changes. One per module;
// not thread-safe.
class RopeTableCache {
 public:
  const std::vector<torch::Tensor>& Get(int64_t t, const RotaryEmbedding& rope, const torch::TensorOptions& opts);

 private:
  std::vector<torch::Tensor> tables_;
  int64_t t_ = -1;
};

}  // namespace trainyard::engine
