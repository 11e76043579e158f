#include "worker/engine/data/synthetic_dataset.h"

namespace trainyard::engine {
namespace {

std::uint64_t SplitMix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double Uniform01(std::uint64_t& state) {
  return static_cast<double>(SplitMix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

SyntheticDataset::SyntheticDataset(std::uint64_t seed, int64_t vocab_size, int64_t seq_len, int64_t first_index)
    : seed_(seed), vocab_size_(vocab_size), seq_len_(seq_len), first_index_(first_index) {
  successors_.resize(static_cast<size_t>(vocab_size * kSuccessors));
  cumulative_.resize(successors_.size());
  std::uint64_t state = seed ^ 0x5eed5eed5eed5eedULL;
  for (int64_t v = 0; v < vocab_size; ++v) {
    double total = 0;
    double w[kSuccessors];
    for (int j = 0; j < kSuccessors; ++j) {
      successors_[v * kSuccessors + j] = static_cast<int64_t>(SplitMix64(state) % static_cast<std::uint64_t>(vocab_size));
      w[j] = 0.05 + Uniform01(state);
      total += w[j];
    }
    double acc = 0;
    for (int j = 0; j < kSuccessors; ++j) {
      acc += w[j] / total;
      cumulative_[v * kSuccessors + j] = acc;
    }
    cumulative_[v * kSuccessors + kSuccessors - 1] = 1.0;
  }
}

void SyntheticDataset::Sample(int64_t index, int64_t* out) const {
  std::uint64_t state = seed_ * 0xd1342543de82ef95ULL + static_cast<std::uint64_t>(first_index_ + index);
  SplitMix64(state);  // decorrelate neighbouring indices
  int64_t tok = static_cast<int64_t>(SplitMix64(state) % static_cast<std::uint64_t>(vocab_size_));
  out[0] = tok;
  for (int64_t t = 1; t <= seq_len_; ++t) {
    const double u = Uniform01(state);
    const double* cum = &cumulative_[tok * kSuccessors];
    int j = 0;
    while (j < kSuccessors - 1 && u >= cum[j]) ++j;
    tok = successors_[tok * kSuccessors + j];
    out[t] = tok;
  }
}

std::string SyntheticDataset::Describe() const {
  return "synthetic Markov chain (seed " + std::to_string(seed_) + ", vocab " + std::to_string(vocab_size_) + ", " +
         std::to_string(kSuccessors) + " successors per token" +
         (first_index_ != 0 ? ", samples from " + std::to_string(first_index_) : std::string()) + ")";
}

}  // namespace trainyard::engine
