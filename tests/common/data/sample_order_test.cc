// SampleOrder: every epoch is a permutation of [0, N), epochs and seeds differ, and the
// values are pinned (the order must never change under a resumed run).
#include <algorithm>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "common/data/sample_order.h"

namespace trainyard::data {
namespace {

std::vector<std::int64_t> Epoch(const SampleOrder& o, std::int64_t e) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < o.num_samples(); ++i) v.push_back(o.SampleOf(e * o.num_samples() + i));
  return v;
}

bool IsPermutation(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] != static_cast<std::int64_t>(i)) return false;
  }
  return true;
}

TEST(SampleOrderTest, EveryEpochIsAPermutation) {
  for (std::int64_t n : {1, 2, 3, 5, 7, 8, 13, 16, 31, 64, 97, 128, 1000, 1024, 4093, 65536, 65537}) {
    const SampleOrder o(n, /*shuffle=*/true, 42);
    for (std::int64_t e : {0, 1, 7}) {
      const std::vector<std::int64_t> v = Epoch(o, e);
      EXPECT_TRUE(IsPermutation(v)) << "N=" << n << " epoch " << e;
    }
  }
}

TEST(SampleOrderTest, WithoutShuffleItIsGModN) {
  const SampleOrder o(10, /*shuffle=*/false, 42);
  for (std::int64_t g : {0, 3, 9, 10, 25, 1000003}) EXPECT_EQ(o.SampleOf(g), g % 10);
  EXPECT_EQ(o.EpochOf(0), 1);
  EXPECT_EQ(o.EpochOf(9), 1);
  EXPECT_EQ(o.EpochOf(10), 2);
  EXPECT_EQ(o.EpochOf(25), 3);
}

TEST(SampleOrderTest, EpochsAndSeedsGiveDifferentOrders) {
  for (std::int64_t n : {16, 97, 1000}) {
    const SampleOrder a(n, true, 42), b(n, true, 43);
    std::set<std::vector<std::int64_t>> orders;
    for (std::int64_t e = 0; e < 5; ++e) orders.insert(Epoch(a, e));
    EXPECT_EQ(orders.size(), 5u) << n;
    EXPECT_NE(Epoch(a, 0), Epoch(b, 0)) << n;
    std::vector<std::int64_t> identity(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) identity[i] = i;
    EXPECT_NE(Epoch(a, 0), identity) << n;
    // Mixed, not a rotation: few samples keep their place.
    int fixed = 0;
    const std::vector<std::int64_t> v = Epoch(a, 0);
    for (std::int64_t i = 0; i < n; ++i) fixed += v[i] == i;
    EXPECT_LT(fixed, n / 4 + 2) << n;
  }
  // Two samples: the two orders both occur over epochs.
  const SampleOrder two(2, true, 42);
  std::set<std::vector<std::int64_t>> seen;
  for (std::int64_t e = 0; e < 32; ++e) seen.insert(Epoch(two, e));
  EXPECT_EQ(seen.size(), 2u);
}

TEST(SampleOrderTest, ValuesArePinned) {
  // If this fails the order changed: resumed runs and recorded experiments would read
  // different samples. Change it only with a format note in docs/data.md.
  const SampleOrder o(10, true, 42);
  EXPECT_EQ(Epoch(o, 0), (std::vector<std::int64_t>{0, 3, 1, 6, 5, 7, 9, 8, 2, 4}));
  EXPECT_EQ(Epoch(o, 1), (std::vector<std::int64_t>{5, 9, 0, 7, 6, 8, 3, 1, 4, 2}));
  const SampleOrder big(int64_t{1} << 40, true, 7);
  EXPECT_EQ(big.SampleOf(123456789), 201899688829);
}

TEST(SampleOrderTest, IsAPureFunctionOfSeedNAndG) {
  const SampleOrder a(1000, true, 5), b(1000, true, 5);
  for (std::int64_t g = 0; g < 5000; g += 37) EXPECT_EQ(a.SampleOf(g), b.SampleOf(g));
  EXPECT_EQ(a.SampleOf(2345), a.Permute(2, 345));
  EXPECT_EQ(a.EpochOf(2345), 3);
}

}  // namespace
}  // namespace trainyard::data
