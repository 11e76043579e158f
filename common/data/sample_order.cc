#include "common/data/sample_order.h"

#include <cstdlib>
#include <cstdio>

namespace trainyard::data {
namespace {

// splitmix64's finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
std::uint64_t Mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

SampleOrder::SampleOrder(std::int64_t num_samples, bool shuffle, std::uint64_t seed)
    : n_(num_samples), shuffle_(shuffle), seed_(seed) {
  if (num_samples < 1) {
    std::fprintf(stderr, "SampleOrder: num_samples %lld < 1\n", static_cast<long long>(num_samples));
    std::abort();
  }
  int bits = 0;
  while (bits < 62 && (std::uint64_t{1} << bits) < static_cast<std::uint64_t>(num_samples)) ++bits;
  half_bits_ = (bits + 1) / 2;
}

std::int64_t SampleOrder::Permute(std::uint64_t epoch, std::int64_t i) const {
  if (!shuffle_ || n_ == 1) return i;
  const std::uint64_t mask = (std::uint64_t{1} << half_bits_) - 1;
  std::uint64_t keys[kFeistelRounds];
  const std::uint64_t epoch_key = Mix(seed_ ^ Mix(epoch ^ 0x6a09e667f3bcc908ULL));
  for (int r = 0; r < kFeistelRounds; ++r) keys[r] = Mix(epoch_key + static_cast<std::uint64_t>(r));
  std::uint64_t x = static_cast<std::uint64_t>(i);
  // Cycle walking: the network permutes [0, 2^(2h)); applying it again from a value
  // outside [0, N) stays on i's cycle, which returns into [0, N), so this is a
  // bijection on [0, N).
  do {
    std::uint64_t left = x >> half_bits_;
    std::uint64_t right = x & mask;
    for (int r = 0; r < kFeistelRounds; ++r) {
      const std::uint64_t next = left ^ (Mix(right ^ keys[r]) & mask);
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= static_cast<std::uint64_t>(n_));
  return static_cast<std::int64_t>(x);
}

std::int64_t SampleOrder::SampleOf(std::int64_t g) const {
  const std::int64_t epoch = g / n_;
  return Permute(static_cast<std::uint64_t>(epoch), g - epoch * n_);
}

}  // namespace trainyard::data
