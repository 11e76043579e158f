// The training order of the samples: global sample number g (0, 1, 2, ... as the steps
// consume them, worker/engine/data/dataset.h) -> sample index in [0, N).
//
// Epoch e = g / N (0-based; EpochOf reports it 1-based) reads every sample once:
// without shuffle g mod N, with shuffle perm_e(g mod N), where perm_e is a bijection on
// [0, N) keyed by (seed, e). perm_e is stateless: a balanced Feistel network of
// kFeistelRounds splitmix64 rounds on the smallest even-bit power of two >= N, walked in
// cycles until the value falls in [0, N). So no rank holds N indices, every rank
// computes any g alone, and the order is a pure function of (seed, N, g), identical
// under every compiler and standard library (integer arithmetic only): resuming at any
// step reads exactly what the uninterrupted run would have. The domain is < 4N, so a
// lookup walks fewer than 4 steps on average.
//
// Thread-safe (immutable).
#pragma once

#include <cstdint>

namespace trainyard::data {

inline constexpr int kFeistelRounds = 6;

class SampleOrder {
 public:
  // num_samples >= 1.
  SampleOrder(std::int64_t num_samples, bool shuffle, std::uint64_t seed);

  std::int64_t num_samples() const { return n_; }
  bool shuffled() const { return shuffle_; }
  // The sample read at global sample number g >= 0.
  std::int64_t SampleOf(std::int64_t g) const;
  // 1-based epoch of g.
  std::int64_t EpochOf(std::int64_t g) const { return g / n_ + 1; }
  // perm_epoch(i) for i in [0, N), epoch 0-based (identity without shuffle).
  std::int64_t Permute(std::uint64_t epoch, std::int64_t i) const;

 private:
  std::int64_t n_;
  bool shuffle_;
  std::uint64_t seed_;
  int half_bits_ = 0;  // the domain is 2^(2 * half_bits_)
};

}  // namespace trainyard::data
