#include "worker/engine/model/layers/rotary_embedding.h"

#include <algorithm>
#include <cmath>

#include "worker/engine/kernels/reference_ops.h"

namespace trainyard::engine {

torch::Tensor RotaryEmbedding::InverseFrequencies(int64_t head_dim, double theta, const YarnScaling& yarn) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto i = torch::arange(0, head_dim / 2, opts);
  auto freqs = torch::pow(theta, -2.0 * i / static_cast<double>(head_dim));
  if (yarn.factor <= 1.0) return freqs;
  // The dimension whose wavelength turns `rotations` times over original_seq_len.
  const auto dim_at = [&](double rotations) {
    return head_dim * std::log(yarn.original_seq_len / (rotations * 2 * M_PI)) / (2 * std::log(theta));
  };
  const double low = std::max(std::floor(dim_at(yarn.beta_fast)), 0.0);
  double high = std::min(std::ceil(dim_at(yarn.beta_slow)), static_cast<double>(head_dim - 1));
  if (low == high) high += 0.001;  // a ramp of width zero would divide by zero
  // ramp 0 keeps the original frequency (high frequencies), 1 interpolates fully.
  auto ramp = ((i - low) / (high - low)).clamp(0, 1);
  return freqs / yarn.factor * ramp + freqs * (1 - ramp);
}

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, int64_t max_seq_len, double theta, const YarnScaling& yarn) {
  // Angles in double so long sequences do not lose precision before the cast.
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  auto freqs = InverseFrequencies(head_dim, theta, yarn);
  auto pos = torch::arange(0, max_seq_len, opts);
  auto angles = torch::outer(pos, freqs);
  cos_ = torch::cos(angles).to(torch::kFloat32);
  sin_ = torch::sin(angles).to(torch::kFloat32);
  cos_full_ = torch::stack({cos_, cos_}, -1).reshape({max_seq_len, -1});
  sin_full_ = torch::stack({-sin_, sin_}, -1).reshape({max_seq_len, -1});
}

torch::Tensor RotaryEmbedding::CosTable(int64_t seq) const {
  TORCH_CHECK(seq <= cos_full_.size(0), "RoPE: sequence length ", seq, " exceeds table size ", cos_full_.size(0));
  return cos_full_.narrow(0, 0, seq);
}

torch::Tensor RotaryEmbedding::SinTable(int64_t seq) const {
  TORCH_CHECK(seq <= sin_full_.size(0), "RoPE: sequence length ", seq, " exceeds table size ", sin_full_.size(0));
  return sin_full_.narrow(0, 0, seq);
}

torch::Tensor RotaryEmbedding::Apply(const torch::Tensor& x) const {
  return Rotate(x, CosTable(x.size(1)), SinTable(x.size(1)));
}

torch::Tensor RotaryEmbedding::Rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return reference::Rotate(x, cos, sin);
}

const std::vector<torch::Tensor>& RopeTableCache::Get(int64_t t, const RotaryEmbedding& rope,
                                                      const torch::TensorOptions& opts) {
  if (t_ == t && tables_[0].device() == opts.device()) return tables_;
  const auto fp32 = opts.dtype(torch::kFloat);
  tables_ = {rope.CosTable(t).to(fp32), rope.SinTable(t).to(fp32)};
  t_ = t;
  return tables_;
}

}  // namespace trainyard::engine
