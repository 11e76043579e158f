// Megatron indexed datasets written by the independent Python writer (write_indexed.py)
// for every dtype code, read back through TokenCorpus; and every way an .idx/.bin pair
// can be broken, each refused naming the file and the field or offset.
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/data/indexed_index.h"
#include "common/data/token_corpus.h"
#include "tests/common/data/data_test_util.h"

namespace trainyard::data {
namespace {

using testing::ErrorHas;
using testing::FreshDir;
using testing::WriteIndexed;

constexpr char kKey[] = "training.dataset_path";

absl::StatusOr<std::unique_ptr<TokenCorpus>> OpenTokens(const std::string& path_list, std::int64_t vocab = 1000) {
  CorpusOptions o;
  o.kind = "tokens";
  o.path_list = path_list;
  o.vocab_size = vocab;
  o.key = kKey;
  return TokenCorpus::Open(o);
}

// Documents of sequences of tokens as JSON, and the flat stream the test expects.
struct Docs {
  std::vector<std::vector<std::vector<std::int64_t>>> docs;
  std::string Json() const {
    std::string s = "[";
    for (std::size_t d = 0; d < docs.size(); ++d) {
      s += d ? ",[" : "[";
      for (std::size_t q = 0; q < docs[d].size(); ++q) {
        s += q ? ",[" : "[";
        for (std::size_t k = 0; k < docs[d][q].size(); ++k) s += (k ? "," : "") + std::to_string(docs[d][q][k]);
        s += "]";
      }
      s += "]";
    }
    return s + "]";
  }
  std::vector<std::int64_t> Stream() const {
    std::vector<std::int64_t> out;
    for (const auto& d : docs) {
      for (const auto& q : d) out.insert(out.end(), q.begin(), q.end());
    }
    return out;
  }
};

// Five documents (one empty, one holding an empty sequence) of values below `bound`.
Docs MakeDocs(std::int64_t bound, int salt) {
  Docs d;
  const int sequences[] = {1, 3, 0, 2, 1};
  const int lengths[] = {5, 1, 9, 0, 4, 7, 2};
  int next = 0;
  for (int doc = 0; doc < 5; ++doc) {
    d.docs.emplace_back();
    for (int q = 0; q < sequences[doc]; ++q) {
      std::vector<std::int64_t> seq;
      const int n = lengths[next++ % 7];
      for (int k = 0; k < n; ++k) seq.push_back((doc * 131 + q * 17 + k * 7 + salt) % bound);
      d.docs.back().push_back(seq);
    }
  }
  return d;
}

std::string Spec(const std::string& prefix, int code, const std::string& docs_json, const std::string& extra = "") {
  return "{\"prefix\": \"" + prefix + "\", \"dtype\": " + std::to_string(code) + ", \"docs\": " + docs_json +
         (extra.empty() ? "" : ", " + extra) + "}";
}

std::vector<std::int64_t> ReadAll(const TokenCorpus& c) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(c.total_tokens()));
  EXPECT_TRUE(c.Read(0, c.total_tokens(), out.data()).ok());
  return out;
}

TEST(IndexedDatasetTest, EveryDtypeCodeReadsBackItsDocuments) {
  const std::string dir = FreshDir();
  const struct {
    int code;
    const char* name;
    std::int64_t bound;
  } kinds[] = {{1, "uint8", 256},  {2, "int8", 128},     {3, "int16", 1000}, {4, "int32", 1000},
               {5, "int64", 1000}, {6, "float64", 1000}, {7, "float32", 1000}, {8, "uint16", 1000}};
  for (const auto& k : kinds) {
    SCOPED_TRACE(k.name);
    const Docs docs = MakeDocs(k.bound, k.code);
    const std::string prefix = dir + "/ds_" + k.name;
    WriteIndexed(Spec(prefix, k.code, docs.Json()));
    for (const std::string& entry : {prefix + ".idx", prefix + ".bin"}) {
      auto c = OpenTokens(entry);
      ASSERT_TRUE(c.ok()) << c.status();
      const std::vector<std::int64_t> expect = docs.Stream();
      ASSERT_EQ((*c)->files().size(), 1u);
      const CorpusFile& f = (*c)->files()[0];
      EXPECT_EQ(f.spec.format, CorpusFormat::kIndexed);
      EXPECT_EQ(std::string(TokenDtypeName(f.spec.dtype)), k.name);
      EXPECT_EQ(f.spec.path, prefix + ".bin");
      EXPECT_EQ(f.spec.index_path, prefix + ".idx");
      EXPECT_EQ(f.documents, 5);
      EXPECT_EQ((*c)->total_documents(), 5);
      EXPECT_EQ((*c)->total_tokens(), static_cast<std::int64_t>(expect.size()));
      EXPECT_EQ(ReadAll(**c), expect);
      // A window across sequence and document boundaries.
      std::vector<std::int64_t> mid(9);
      ASSERT_TRUE((*c)->Read(3, 9, mid.data()).ok());
      EXPECT_EQ(mid, std::vector<std::int64_t>(expect.begin() + 3, expect.begin() + 12));
    }
  }
}

TEST(IndexedDatasetTest, SeveralShardsAndAFlatFileConcatenateInListedOrder) {
  const std::string dir = FreshDir();
  const Docs a = MakeDocs(1000, 1), b = MakeDocs(1000, 2);
  WriteIndexed(Spec(dir + "/a", 4, a.Json()));
  WriteIndexed(Spec(dir + "/b", 8, b.Json()));
  testing::WriteBytes(dir + "/c.u16", testing::LittleEndian({9, 8, 7}, 2));
  auto c = OpenTokens(dir + "/b.idx," + dir + "/c.u16," + dir + "/a.bin");
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::int64_t> expect = b.Stream();
  expect.insert(expect.end(), {9, 8, 7});
  const std::vector<std::int64_t> sa = a.Stream();
  expect.insert(expect.end(), sa.begin(), sa.end());
  EXPECT_EQ(ReadAll(**c), expect);
  EXPECT_EQ((*c)->total_documents(), 10);
  ASSERT_EQ((*c)->files().size(), 3u);
  EXPECT_EQ((*c)->files()[1].documents, -1);
  EXPECT_EQ((*c)->files()[1].first_token, static_cast<std::int64_t>(b.Stream().size()));
  EXPECT_EQ((*c)->files()[2].first_token, static_cast<std::int64_t>(b.Stream().size() + 3));
  // A read that starts in the first shard and ends in the third.
  const std::int64_t from = static_cast<std::int64_t>(b.Stream().size()) - 2;
  std::vector<std::int64_t> span(7);
  ASSERT_TRUE((*c)->Read(from, 7, span.data()).ok());
  EXPECT_EQ(span, std::vector<std::int64_t>(expect.begin() + from, expect.begin() + from + 7));
}

TEST(IndexedDatasetTest, AGlobTakesShardsInBytewiseOrderAndEachDatasetOnce) {
  const std::string dir = FreshDir();
  // Bytewise: "shard_10" < "shard_9" < "shard_B" < "shard_a" (no locale collation).
  const std::vector<std::string> sorted = {"shard_10", "shard_9", "shard_B", "shard_a"};
  std::vector<std::int64_t> expect;
  for (const std::string& name : std::vector<std::string>{"shard_a", "shard_9", "shard_B", "shard_10"}) {
    Docs d;
    d.docs = {{{static_cast<std::int64_t>(name.back()), static_cast<std::int64_t>(name.size())}}};
    WriteIndexed(Spec(dir + "/" + name, 8, d.Json()));
  }
  for (const std::string& name : sorted) {
    expect.push_back(static_cast<std::int64_t>(name.back()));
    expect.push_back(static_cast<std::int64_t>(name.size()));
  }
  for (const char* pattern : {"/shard_*.idx", "/shard_*.bin", "/shard_*"}) {
    SCOPED_TRACE(pattern);
    auto c = OpenTokens(dir + pattern);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_EQ((*c)->files().size(), 4u);
    for (std::size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ((*c)->files()[i].spec.index_path, dir + "/" + sorted[i] + ".idx");
    EXPECT_EQ(ReadAll(**c), expect);
    EXPECT_EQ((*c)->total_documents(), 4);
  }
}

// Hostile .idx/.bin pairs: each one's error names the file and what is wrong where.
struct Broken {
  const char* name;
  const char* extra;  // spec keys
  std::vector<std::string> error;
};

void PrintTo(const Broken& b, std::ostream* os) { *os << b.name; }

class BrokenIndexTest : public ::testing::TestWithParam<Broken> {};

TEST_P(BrokenIndexTest, IsRefusedWithAPreciseError) {
  const std::string dir = FreshDir();
  const Docs docs = MakeDocs(1000, 3);  // 7 sequences of 5,1,9,0,4,7,2 tokens = 28
  WriteIndexed(Spec(dir + "/x", 4, docs.Json(), GetParam().extra));
  auto c = OpenTokens(dir + "/x.idx");
  std::vector<std::string> parts = GetParam().error;
  parts.push_back(kKey);
  EXPECT_TRUE(ErrorHas(c.status(), parts));
}

INSTANTIATE_TEST_SUITE_P(
    Idx, BrokenIndexTest,
    ::testing::Values(
        Broken{"magic", "\"magic\": \"MMIDIDX\\u0000X\"", {"x.idx", "bad magic at byte offset 0"}},
        Broken{"version", "\"version\": 2", {"x.idx", "version 2 at byte offset 9"}},
        Broken{"dtype", "\"dtype_code\": 9", {"x.idx", "dtype code 9 at byte offset 17"}},
        Broken{"dtype0", "\"dtype_code\": 0", {"x.idx", "dtype code 0"}},
        Broken{"sequences", "\"sequence_count\": 1099511627776", {"x.idx", "sequence_count 1099511627776", "overrun"}},
        Broken{"documents", "\"document_count\": 1000", {"x.idx", "document_count 1000", "overrun"}},
        Broken{"header", "\"idx_cut\": 140", {"x.idx", "shorter than the 34-byte header"}},
        Broken{"cut", "\"idx_cut\": 3", {"x.idx", "overrun the file"}},
        Broken{"trailing", "\"trailing\": 3", {"x.idx", "3 trailing bytes"}},
        Broken{"modes", "\"modes\": true", {"x.idx", "multimodal", "unsupported"}},
        Broken{"negative", "\"lengths\": {\"2\": -4}", {"x.idx", "sequence_lengths[2] = -4 at byte offset 42", "negative"}},
        Broken{"gap", "\"pointers\": {\"3\": 64}", {"x.idx", "sequence_pointers[3] = 64 at byte offset 86", "not contiguous",
                                                    "expected 60"}},
        Broken{"first", "\"pointers\": {\"0\": 4}", {"sequence_pointers[0] = 4", "expected 0"}},
        Broken{"overrun", "\"lengths\": {\"6\": 3}", {"x.idx", "sequence 6", "past the end of", "x.bin (112 bytes)"}},
        Broken{"bin_cut", "\"bin_cut\": 4", {"x.idx", "sequence 6", "past the end of", "x.bin (108 bytes)"}},
        Broken{"bin_extra", "\"bin_extra\": 8", {"x.bin: 120 bytes", "cover 112", "does not belong"}},
        Broken{"doc_start", "\"doc_indices\": [1, 1, 4, 4, 6, 7]", {"x.idx", "document_indices[0] = 1", "must be 0"}},
        Broken{"doc_down", "\"doc_indices\": [0, 4, 1, 4, 6, 7]", {"document_indices[2] = 1", "below"}},
        Broken{"doc_end", "\"doc_indices\": [0, 1, 4, 4, 6, 6]", {"document_indices[5] = 6", "must equal sequence_count 7"}},
        Broken{"doc_past", "\"doc_indices\": [0, 1, 9, 4, 6, 7]", {"document_indices[2] = 9", "past sequence_count 7"}},
        Broken{"doc_none", "\"doc_indices\": []", {"document_count is 0"}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(IndexedDatasetTest, InvalidTokensAreRefusedWhereTheyAreRead) {
  const std::string dir = FreshDir();
  // int32 -5 at stream position 6; the first sequence (5 tokens) reads fine.
  WriteIndexed(Spec(dir + "/neg", 4, "[[[1, 2, 3, 4, 5], [6, -5, 7]]]"));
  auto neg = OpenTokens(dir + "/neg.idx");
  ASSERT_TRUE(neg.ok()) << neg.status();  // tokens are checked as they are read
  std::vector<std::int64_t> out(8);
  EXPECT_TRUE((*neg)->Read(0, 5, out.data()).ok());
  EXPECT_TRUE(ErrorHas((*neg)->Read(2, 6, out.data()),
                       {kKey, dir + "/neg.bin", "token -5 (int32) at byte offset 24", "model.vocab_size 1000"}));
  // No vocabulary holds a negative id: nothing to set.
  EXPECT_EQ(std::string((*neg)->Read(2, 6, out.data()).message()).find("set model"), std::string::npos);

  WriteIndexed(Spec(dir + "/frac", 7, "[[[1, 2.5]]]"));
  EXPECT_TRUE(ErrorHas((*OpenTokens(dir + "/frac.bin"))->Read(0, 2, out.data()),
                       {"frac.bin", "token 2.5 (float32) at byte offset 4"}));
  WriteIndexed(Spec(dir + "/nan", 6, "[[[NaN]], [[3]]]"));
  EXPECT_TRUE(ErrorHas((*OpenTokens(dir + "/nan.bin"))->Read(0, 2, out.data()),
                       {"nan.bin", "token nan (float64) at byte offset 0"}));
  WriteIndexed(Spec(dir + "/big", 8, "[[[1, 2, 3]], [[999, 1000]]]"));
  auto big = OpenTokens(dir + "/big.idx");
  ASSERT_TRUE(big.ok());
  EXPECT_TRUE((*big)->Read(0, 4, out.data()).ok());
  EXPECT_EQ(out[3], 999);
  EXPECT_TRUE(ErrorHas((*big)->Read(0, 5, out.data()), {"big.bin", "token 1000 (uint16) at byte offset 8"}));
  WriteIndexed(Spec(dir + "/neg64", 5, "[[[-1]]]"));
  EXPECT_TRUE(ErrorHas((*OpenTokens(dir + "/neg64.idx"))->Read(0, 1, out.data()), {"token -1 (int64) at byte offset 0"}));
}

TEST(IndexedDatasetTest, EmptyShardAndMissingFilesAreErrors) {
  const std::string dir = FreshDir();
  WriteIndexed(Spec(dir + "/empty", 8, "[]"));
  EXPECT_TRUE(ErrorHas(OpenTokens(dir + "/empty.idx").status(), {kKey, "empty.idx", "holds no tokens", "empty shard"}));
  WriteIndexed(Spec(dir + "/hollow", 8, "[[[]], [[]]]"));  // documents of empty sequences
  EXPECT_TRUE(ErrorHas(OpenTokens(dir + "/hollow.bin").status(), {"hollow.idx", "holds no tokens"}));
  WriteIndexed(Spec(dir + "/lone", 8, "[[[1, 2]]]"));
  ASSERT_EQ(std::remove((dir + "/lone.bin").c_str()), 0);
  EXPECT_TRUE(ErrorHas(OpenTokens(dir + "/lone.idx").status(), {kKey, "lone.idx", "has no " + dir + "/lone.bin"}));
  EXPECT_TRUE(ErrorHas(OpenTokens(dir + "/absent.idx").status(), {kKey, "absent.idx", "does not exist"}));
}

TEST(IndexedIndexTest, ValidatesBytesInMemoryInWindows) {
  // More sequences than one window: the streaming pass checks every window's pointers.
  const std::uint64_t n = kWindowEntries * 2 + 5;
  std::string idx(kIndexedMagic, kIndexedMagicSize);
  auto put = [&idx](std::uint64_t v, int bytes) { idx += testing::LittleEndian({v}, bytes); };
  put(1, 8);
  idx.push_back(8);
  put(n, 8);
  put(2, 8);
  for (std::uint64_t i = 0; i < n; ++i) put(1, 4);
  for (std::uint64_t i = 0; i < n; ++i) put(2 * i, 8);
  put(0, 8);
  put(n, 8);
  auto info = ValidateIndexedIndex(MemorySource("m.idx", idx), 2 * n, "m.bin");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tokens, n);
  EXPECT_EQ(info->documents, 1u);
  EXPECT_EQ(info->sequences, n);
  // A pointer wrong in the last window only.
  const std::uint64_t last = kIndexedHeaderSize + 4 * n + 8 * (n - 1);
  std::string broken = idx;
  broken[last] = 1;
  EXPECT_TRUE(ErrorHas(ValidateIndexedIndex(MemorySource("m.idx", broken), 2 * n, "m.bin").status(),
                       {"m.idx: sequence_pointers[" + std::to_string(n - 1) + "]", "at byte offset " + std::to_string(last)}));
}

}  // namespace
}  // namespace trainyard::data
