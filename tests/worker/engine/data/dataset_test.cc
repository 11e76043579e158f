// The engine's datasets: the synthetic chain, the batch order of LoadBatch under every
// (dp, grad_accum_steps) layout, and the file datasets over common/data (causal packing
// across documents and files, the shuffled order and its epochs, evaluation batches in
// file order, the validation dataset, InputError, the start-up summary).
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "worker/engine/data/corpus_dataset.h"
#include "worker/engine/data/dataset.h"
#include "worker/engine/data/synthetic_dataset.h"

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

TrainingConfig FileTraining(const std::string& kind, const std::string& path, int seq_len) {
  TrainingConfig t;
  t.dataset = kind;
  t.dataset_path = path;
  t.seq_len = seq_len;
  return t;
}

ModelConfig Vocab(int vocab) {
  ModelConfig m;
  m.vocab_size = vocab;
  return m;
}

TEST(TokenFileDatasetTest, ReadsLittleEndianU16AndWraps) {
  std::vector<unsigned char> bytes;
  for (int v = 0; v < 10; ++v) {
    bytes.push_back(static_cast<unsigned char>((v * 100) & 0xff));
    bytes.push_back(static_cast<unsigned char>((v * 100) >> 8));
  }
  const std::string path = WriteFile("engine_tokens.u16", bytes);
  auto d = MakeDataset(FileTraining("tokens", path, 3), Vocab(1000));
  EXPECT_EQ(d->num_samples(), 3);  // floor((10-1)/3)
  std::vector<int64_t> s(4);
  d->Sample(1, s.data());
  EXPECT_EQ(s, (std::vector<int64_t>{300, 400, 500, 600}));
  auto batch = LoadBatch(*d, 1, 0, 1, 2);  // samples 2 and 3 -> 3 wraps to 0
  EXPECT_EQ(batch[1][0].item<int64_t>(), 0);
  EXPECT_EQ(batch[0][0].item<int64_t>(), 600);
  EXPECT_EQ(EpochOfStep(*d, 0, 2), 1);  // g = 0, 1
  EXPECT_EQ(EpochOfStep(*d, 1, 2), 2);  // g = 3 is epoch 2
  // 900 >= 500: found when the sample holding it is read, naming the file and offset.
  auto small = MakeDataset(FileTraining("tokens", path, 3), Vocab(500));
  try {
    LoadBatch(*small, 0, 0, 1, 3);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("training.dataset_path: " + path + ": token 500 (uint16) at byte offset 10"), std::string::npos)
        << what;
  }
}

TEST(TokenFileDatasetTest, TextIsBytesAndBadInputsAreInputErrors) {
  const std::string path = WriteFile("engine_text.txt", {'h', 'e', 'l', 'l', 'o'});
  auto d = MakeDataset(FileTraining("text", path, 2), Vocab(256));
  std::vector<int64_t> s(3);
  d->Sample(1, s.data());
  EXPECT_EQ(s, (std::vector<int64_t>{'l', 'l', 'o'}));
  EXPECT_EQ(d->Describe().rfind("text from training.dataset_path, in file order: 1 file, 5 tokens:", 0), 0u)
      << d->Describe();
  struct Case {
    std::string kind, path;
    int seq_len;
    std::string error;
  } cases[] = {
      {"tokens", path, 2, "training.dataset_path: entry \"" + path + "\": " + path + " does not end in .u16"},
      {"text", path + ".missing", 2, "training.dataset_path: entry"},
      {"text", path, 5, "training.dataset_path: the corpus holds 5 tokens, fewer than one sample of "
                        "training.seq_len+1 = 6"},
      {"csv", path, 2, "training.dataset: \"csv\" is not supported"},
  };
  for (const Case& c : cases) {
    try {
      MakeDataset(FileTraining(c.kind, c.path, c.seq_len), Vocab(256));
      ADD_FAILURE() << "expected an InputError for " << c.kind << " " << c.path;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(c.error), std::string::npos) << e.what();
    }
  }
}


void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string Le(uint64_t v, int width) {
  std::string s;
  for (int b = 0; b < width; ++b) s.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
  return s;
}

// A Megatron indexed dataset of int32 documents, one sequence each (the reader's own
// tests use the independent Python writer; this only needs a valid pair).
void WriteIndexed(const std::string& prefix, const std::vector<std::vector<int64_t>>& docs) {
  std::string bin, lengths, pointers, doc_indices = Le(0, 8);
  uint64_t at = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    for (int64_t t : docs[d]) bin += Le(static_cast<uint64_t>(t), 4);
    lengths += Le(docs[d].size(), 4);
    pointers += Le(at, 8);
    at += docs[d].size() * 4;
    doc_indices += Le(d + 1, 8);
  }
  Write(prefix + ".bin", bin);
  Write(prefix + ".idx", std::string("MMIDIDX\0\0", 9) + Le(1, 8) + Le(4, 1) + Le(docs.size(), 8) +
                             Le(docs.size() + 1, 8) + lengths + pointers + doc_indices);
}

// Tokens 0..n-1 (as uint16), so a sample's first token says where it starts.
std::string Counting(const std::string& name, int n) {
  std::string bytes;
  for (int i = 0; i < n; ++i) bytes += Le(static_cast<uint64_t>(i), 2);
  const std::string path = ::testing::TempDir() + name;
  Write(path, bytes);
  return path;
}

CorpusDatasetOptions Options(const std::string& path, int64_t seq_len, bool shuffle, uint64_t seed = 42) {
  CorpusDatasetOptions o;
  o.kind = "tokens";
  o.path_list = path;
  o.key = "training.dataset_path";
  o.vocab_size = 65536;
  o.seq_len = seq_len;
  o.shuffle = shuffle;
  o.seed = seed;
  return o;
}

std::vector<int64_t> Row(const torch::Tensor& batch, int64_t j) {
  auto row = batch[j].contiguous();
  return std::vector<int64_t>(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
}

TEST(CorpusDatasetTest, PacksDocumentsAndFilesCausallyIntoWindowsOfSeqLenPlusOne) {
  const std::string dir = ::testing::TempDir();
  WriteIndexed(dir + "engine_docs", {{1, 2, 3}, {4}, {5, 6, 7, 8, 9}});
  const std::string flat = dir + "engine_tail.u32";
  Write(flat, Le(10, 4) + Le(11, 4) + Le(12, 4) + Le(13, 4));
  CorpusDataset d(Options(dir + "engine_docs.idx," + flat, 4, false));
  // 13 tokens: floor(12 / 4) = 3 samples; neighbours share one token; sample 1 spans
  // three documents, sample 2 spans the shard and the flat file.
  EXPECT_EQ(d.num_samples(), 3);
  EXPECT_EQ(d.corpus().total_documents(), 3);
  const std::vector<std::vector<int64_t>> expect = {{1, 2, 3, 4, 5}, {5, 6, 7, 8, 9}, {9, 10, 11, 12, 13}};
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<int64_t> s(5);
    d.Sample(i, s.data());
    EXPECT_EQ(s, expect[i]) << i;
  }
  EXPECT_NE(d.Describe().find("engine_docs.idx (megatron int32, 3 documents, 9 tokens)"), std::string::npos)
      << d.Describe();
}

TEST(CorpusDatasetTest, EachShuffledEpochReadsEverySampleOnceInANewOrder) {
  const int64_t seq = 4, n = 30;  // 121 tokens
  CorpusDataset d(Options(Counting("engine_count.u16", 121), seq, true));
  ASSERT_EQ(d.num_samples(), n);
  std::vector<std::vector<int64_t>> epochs(3);
  const int b = 5;  // 6 steps of one rank per epoch
  for (int64_t step = 0; step < 18; ++step) {
    auto batch = LoadBatch(d, step, 0, 1, b);
    for (int j = 0; j < b; ++j) epochs[step / 6].push_back(batch[j][0].item<int64_t>() / seq);
    EXPECT_EQ(EpochOfStep(d, step, b), step / 6 + 1) << step;
  }
  for (auto& e : epochs) {
    std::set<int64_t> distinct(e.begin(), e.end());
    EXPECT_EQ(distinct.size(), static_cast<size_t>(n));
    EXPECT_EQ(*distinct.begin(), 0);
    EXPECT_EQ(*distinct.rbegin(), n - 1);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  std::vector<int64_t> in_order(n);
  for (int64_t i = 0; i < n; ++i) in_order[i] = i;
  EXPECT_NE(epochs[0], in_order);
  // Another seed, another order; the same seed in a fresh dataset (a resumed rank), the same.
  CorpusDataset other(Options(::testing::TempDir() + "engine_count.u16", seq, true, 43));
  CorpusDataset again(Options(::testing::TempDir() + "engine_count.u16", seq, true, 42));
  EXPECT_FALSE(torch::equal(LoadBatch(d, 7, 0, 1, b), LoadBatch(other, 7, 0, 1, b)));
  EXPECT_TRUE(torch::equal(LoadBatch(d, 7, 0, 1, b), LoadBatch(again, 7, 0, 1, b)));
}

TEST(CorpusDatasetTest, ShuffledGlobalBatchesAreTheSameUnderEveryDpAndAccumulation) {
  CorpusDataset d(Options(Counting("engine_layout.u16", 400), 3, true));
  const int b = 4;
  for (int64_t step : {0, 5, 32}) {  // 133 samples: step 32 wraps into epoch 2
    // dp=2, A=1: ranks 0 and 1; dp=1, A=2: micro-batches 0 and 1 of one rank.
    auto dp2 = torch::cat({LoadBatch(d, step, 0, 2, b), LoadBatch(d, step, 1, 2, b)});
    auto a2 = torch::cat({LoadBatch(d, step, 0, 1, b, 2, 0), LoadBatch(d, step, 0, 1, b, 2, 1)});
    EXPECT_TRUE(torch::equal(dp2, a2)) << step;
    // dp=1, A=1 with a doubled batch is the same global batch too.
    EXPECT_TRUE(torch::equal(LoadBatch(d, step, 0, 1, 2 * b), dp2)) << step;
  }
  EXPECT_EQ(EpochOfStep(d, 15, 8), 1);  // last sample 127 < 133
  EXPECT_EQ(EpochOfStep(d, 16, 8), 2);  // last sample 135
}

TEST(CorpusDatasetTest, EvaluationBatchesAreInFileOrderWhateverTheShuffle) {
  const std::string path = Counting("engine_eval.u16", 41);  // 10 samples of 4
  spec::ValidationSpec v;
  v.dataset = "tokens";
  v.dataset_path = path;
  TrainingConfig t;
  t.seq_len = 4;
  t.shuffle = true;  // training's: evaluation never shuffles
  ModelConfig m;
  m.vocab_size = 100;
  auto d = MakeValidationDataset(v, t, m);
  ASSERT_NE(d, nullptr);
  const int dp = 2, b = 3;
  for (int64_t batch : {0, 1, 2}) {
    for (int r = 0; r < dp; ++r) {
      auto got = LoadEvalBatch(*d, batch, r, dp, b);
      for (int j = 0; j < b; ++j) {
        const int64_t sample = ((batch * dp + r) * b + j) % 10;
        std::vector<int64_t> expect;
        for (int64_t k = 0; k <= 4; ++k) expect.push_back(sample * 4 + k);
        EXPECT_EQ(Row(got, j), expect) << batch << " " << r << " " << j;
      }
    }
  }
  EXPECT_NE(DescribeDataset(*d, 6).find("in file order"), std::string::npos);
  EXPECT_NE(DescribeDataset(*d, 4).find("10 samples of seq_len+1 = 5 tokens; 1 epoch = 2.5 steps of 4 samples"),
            std::string::npos)
      << DescribeDataset(*d, 4);
  // Errors name the validation keys.
  v.dataset_path = path + ".gone.u16";
  try {
    MakeValidationDataset(v, t, m);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("validation.dataset_path: entry", 0), 0u) << e.what();
  }
  v.dataset = "";
  v.dataset_path = "";
  EXPECT_EQ(MakeValidationDataset(v, t, m), nullptr);
}

TEST(CorpusDatasetTest, SyntheticHasNoEpochsAndItsValidationSetIsHeldOut) {
  TrainingConfig t;
  t.seq_len = 8;
  ModelConfig m;
  m.vocab_size = 64;
  auto train = MakeDataset(t, m);
  spec::ValidationSpec v;
  v.dataset = "synthetic";
  auto held_out = MakeValidationDataset(v, t, m);
  ASSERT_NE(held_out, nullptr);
  EXPECT_EQ(EpochOfStep(*train, 1000, 64), 0);
  EXPECT_FALSE(torch::equal(LoadEvalBatch(*held_out, 0, 0, 1, 4), LoadEvalBatch(*train, 0, 0, 1, 4)));
  EXPECT_TRUE(torch::equal(LoadEvalBatch(*train, 0, 0, 1, 4), LoadBatch(*train, 0, 0, 1, 4)));
  EXPECT_NE(DescribeDataset(*train, 8).find("no epochs"), std::string::npos) << DescribeDataset(*train, 8);
}

}  // namespace
}  // namespace trainyard::engine
