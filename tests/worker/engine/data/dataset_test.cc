#include <cstdio>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "worker/engine/data/dataset.h"
#include "worker/engine/data/synthetic_dataset.h"
#include "worker/engine/data/token_file_dataset.h"

namespace trainyard::engine {
namespace {

TEST(SyntheticDatasetTest, DeterministicAndSeedDependent) {
  SyntheticDataset a(42, 256, 16), b(42, 256, 16), c(43, 256, 16);
  std::vector<int64_t> sa(17), sb(17), sc(17), s_other(17);
  a.Sample(5, sa.data());
  b.Sample(5, sb.data());
  c.Sample(5, sc.data());
  a.Sample(6, s_other.data());
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  EXPECT_NE(sa, s_other);
  for (int64_t t : sa) {
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 256);
  }
}

TEST(SyntheticDatasetTest, IsAMarkovChainWithFewSuccessors) {
  SyntheticDataset d(1, 64, 200);
  std::vector<std::set<int64_t>> next(64);
  std::vector<int64_t> s(201);
  for (int i = 0; i < 20; ++i) {
    d.Sample(i, s.data());
    for (int t = 0; t < 200; ++t) next[s[t]].insert(s[t + 1]);
  }
  for (const auto& n : next) EXPECT_LE(n.size(), size_t{SyntheticDataset::kSuccessors});
}

TEST(LoadBatchTest, FollowsGlobalSampleOrder) {
  SyntheticDataset d(9, 128, 8);
  const int dp = 3, b = 2;
  for (int64_t k : {0, 4}) {
    for (int r = 0; r < dp; ++r) {
      auto batch = LoadBatch(d, k, r, dp, b);
      ASSERT_EQ(batch.sizes(), (std::vector<int64_t>{b, 9}));
      for (int j = 0; j < b; ++j) {
        std::vector<int64_t> expect(9);
        d.Sample((k * dp + r) * b + j, expect.data());
        auto row = batch[j].contiguous();
        EXPECT_EQ(std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + 9), expect)
            << "k=" << k << " r=" << r << " j=" << j;
      }
    }
  }
  // dp=1 with a doubled batch is the concatenation of dp=2's two ranks.
  auto whole = LoadBatch(d, 3, 0, 1, 4);
  auto halves = torch::cat({LoadBatch(d, 3, 0, 2, 2), LoadBatch(d, 3, 1, 2, 2)});
  EXPECT_TRUE(torch::equal(whole, halves));
}

TEST(LoadBatchTest, MicroBatchesOfOneRankAreTheChunksOfMoreDpRanks) {
  SyntheticDataset d(9, 128, 8);
  // (dp=1, A=2) micro m == (dp=2, A=1) rank m; (dp=2, A=2) rank r micro m == dp=4 rank 2r+m.
  for (int m = 0; m < 2; ++m) {
    EXPECT_TRUE(torch::equal(LoadBatch(d, 5, 0, 1, 3, 2, m), LoadBatch(d, 5, m, 2, 3))) << m;
    for (int r = 0; r < 2; ++r) {
      EXPECT_TRUE(torch::equal(LoadBatch(d, 2, r, 2, 3, 2, m), LoadBatch(d, 2, 2 * r + m, 4, 3))) << r << m;
    }
  }
  // Different micro-batches are different samples.
  EXPECT_FALSE(torch::equal(LoadBatch(d, 5, 0, 1, 3, 2, 0), LoadBatch(d, 5, 0, 1, 3, 2, 1)));
}

std::string WriteFile(const std::string& name, const std::vector<unsigned char>& bytes) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return path;
}

TEST(TokenFileDatasetTest, ReadsLittleEndianU16AndWraps) {
  std::vector<unsigned char> bytes;
  for (int v = 0; v < 10; ++v) {
    bytes.push_back(static_cast<unsigned char>((v * 100) & 0xff));
    bytes.push_back(static_cast<unsigned char>((v * 100) >> 8));
  }
  const std::string path = WriteFile("engine_tokens.u16", bytes);
  TokenFileDataset d("tokens", path, 1000, 3);
  EXPECT_EQ(d.num_samples(), 3);  // floor((10-1)/3)
  std::vector<int64_t> s(4);
  d.Sample(1, s.data());
  EXPECT_EQ(s, (std::vector<int64_t>{300, 400, 500, 600}));
  auto batch = LoadBatch(d, 1, 0, 1, 2);  // samples 2 and 3 -> 3 wraps to 0
  EXPECT_EQ(batch[1][0].item<int64_t>(), 0);
  EXPECT_EQ(batch[0][0].item<int64_t>(), 600);
  EXPECT_THROW(TokenFileDataset("tokens", path, 500, 3), std::invalid_argument);  // 900 >= 500
}

TEST(TokenFileDatasetTest, TextIsBytesAndBadSuffixIsRejected) {
  const std::string path = WriteFile("engine_text.txt", {'h', 'e', 'l', 'l', 'o'});
  TokenFileDataset d("text", path, 256, 2);
  std::vector<int64_t> s(3);
  d.Sample(1, s.data());
  EXPECT_EQ(s, (std::vector<int64_t>{'l', 'l', 'o'}));
  try {
    TokenFileDataset("tokens", path, 256, 2);
    FAIL() << "expected a suffix error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(".u16 or .u32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace trainyard::engine
