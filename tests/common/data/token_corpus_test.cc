// Flat token files, byte text and the dataset_path syntax: widths, concatenation, the
// checks made at open and at read, files that change under the corpus, the summary.
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/data/token_corpus.h"
#include "tests/common/data/data_test_util.h"

namespace trainyard::data {
namespace {

using testing::ErrorHas;
using testing::FreshDir;
using testing::LittleEndian;
using testing::WriteBytes;

constexpr char kKey[] = "validation.dataset_path";

absl::StatusOr<std::unique_ptr<TokenCorpus>> Open(const std::string& kind, const std::string& path_list,
                                                  std::int64_t vocab = 100000, std::size_t max_open = 256) {
  CorpusOptions o;
  o.kind = kind;
  o.path_list = path_list;
  o.vocab_size = vocab;
  o.key = kKey;
  o.max_open_files = max_open;
  return TokenCorpus::Open(o);
}

std::vector<std::int64_t> Read(const TokenCorpus& c, std::int64_t first, std::int64_t count) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(count), -1);
  const absl::Status s = c.Read(first, count, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(TokenCorpusTest, FlatWidthsComeFromTheSuffix) {
  const std::string dir = FreshDir();
  WriteBytes(dir + "/a.u16", LittleEndian({1, 65535, 300}, 2));
  WriteBytes(dir + "/b.u32", LittleEndian({70000, 2}, 4));
  WriteBytes(dir + "/c.bin", LittleEndian({513, 7}, 2));  // no c.idx beside it: nanoGPT uint16
  auto c = Open("tokens", dir + "/a.u16," + dir + "/b.u32," + dir + "/c.bin");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->total_tokens(), 7);
  EXPECT_EQ(Read(**c, 0, 7), (std::vector<std::int64_t>{1, 65535, 300, 70000, 2, 513, 7}));
  const auto& files = (*c)->files();
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].spec.dtype, TokenDtype::kUint16);
  EXPECT_EQ(files[1].spec.dtype, TokenDtype::kUint32);
  EXPECT_EQ(files[2].spec.dtype, TokenDtype::kUint16);
  EXPECT_EQ(files[2].spec.format, CorpusFormat::kFlat);
  EXPECT_EQ(files[2].documents, -1);
  EXPECT_EQ((*c)->total_documents(), 0);
  EXPECT_EQ(Read(**c, 2, 4), (std::vector<std::int64_t>{300, 70000, 2, 513}));
}

TEST(TokenCorpusTest, TextIsOneTokenPerByteOfAnyFile) {
  const std::string dir = FreshDir();
  WriteBytes(dir + "/notes.md", std::string("hi\xff\x00!", 5));
  auto c = Open("text", dir + "/notes.md", 256);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Read(**c, 0, 5), (std::vector<std::int64_t>{'h', 'i', 255, 0, '!'}));
  EXPECT_EQ((*c)->files()[0].spec.format, CorpusFormat::kText);
  auto small = Open("text", dir + "/notes.md", 200);
  ASSERT_TRUE(small.ok());
  std::vector<std::int64_t> out(5);
  EXPECT_TRUE(ErrorHas((*small)->Read(0, 5, out.data()),
                       {kKey, dir + "/notes.md", "token 255 (uint8) at byte offset 2", "model.vocab_size 200",
                        // What to set, not only what is wrong.
                        "; set model.vocab_size to at least 256, or to the size trainyard-tokenize printed"}));
}

TEST(TokenCorpusTest, ATokenPastTheFirstReadWindowIsReportedAtItsByteOffset) {
  const std::string dir = FreshDir();
  const std::uint64_t n = kReadWindowBytes / 2 + 1000;  // > one window of uint16
  std::vector<std::uint64_t> values(n);
  for (std::uint64_t i = 0; i < n; ++i) values[i] = (i * 7919) % 5000;
  values[n - 3] = 5000;  // == vocab
  WriteBytes(dir + "/w.u16", LittleEndian(values, 2));
  auto c = Open("tokens", dir + "/w.u16", 5000);
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<std::int64_t> out(n);
  EXPECT_TRUE(ErrorHas((*c)->Read(0, static_cast<std::int64_t>(n), out.data()),
                       {dir + "/w.u16", "token 5000 (uint16) at byte offset " + std::to_string(2 * (n - 3))}));
  const std::vector<std::int64_t> head = Read(**c, 0, static_cast<std::int64_t>(n - 3));
  for (std::uint64_t i = 0; i < n - 3; i += 9973) EXPECT_EQ(head[i], static_cast<std::int64_t>(values[i])) << i;
  EXPECT_EQ(head.back(), static_cast<std::int64_t>(values[n - 4]));
}

TEST(TokenCorpusTest, BadEntriesAndFilesAreErrorsNamingThem) {
  const std::string dir = FreshDir();
  WriteBytes(dir + "/ok.u16", LittleEndian({1, 2}, 2));
  WriteBytes(dir + "/odd.u16", std::string(3, '\0'));
  WriteBytes(dir + "/odd.u32", std::string(6, '\0'));
  WriteBytes(dir + "/empty.u16", "");
  WriteBytes(dir + "/empty.txt", "");
  WriteBytes(dir + "/notes.txt", "x");
  ::mkdir((dir + "/folder.u16").c_str(), 0755);
  const std::string ok = dir + "/ok.u16";
  struct Case {
    std::string kind, path;
    std::vector<std::string> error;
  } cases[] = {
      {"tokens", "relative/ok.u16", {kKey, "entry \"relative/ok.u16\"", "not an absolute path"}},
      {"tokens", dir + "/../x/ok.u16", {kKey, "\"..\" component"}},
      {"tokens", dir + "/./ok.u16", {kKey, "\".\" or \"..\" component"}},
      {"tokens", dir + "//ok.u16", {kKey, "empty, \".\" or \"..\" component"}},
      {"tokens", ok + ",", {kKey, "has an empty entry"}},
      {"tokens", ok + ",," + ok, {kKey, "has an empty entry"}},
      {"tokens", "", {kKey, "is empty"}},
      {"tokens", dir + "/missing.u16", {kKey, "file " + dir + "/missing.u16 does not exist"}},
      {"tokens", ok + "," + dir + "/missing.u32", {"entry \"" + dir + "/missing.u32\"", "does not exist"}},
      {"tokens", dir + "/folder.u16", {kKey, "folder.u16 is not a regular file"}},
      {"tokens", dir + "/nothing*.u16", {kKey, "entry \"" + dir + "/nothing*.u16\"", "matches no file"}},
      {"tokens", dir + "/notes.txt", {kKey, "notes.txt does not end in .u16, .u32, .bin or .idx"}},
      {"tokens", dir + "/no*.txt", {kKey, "notes.txt does not end in .u16, .u32, .bin or .idx"}},
      {"tokens", dir + "/odd.u16", {kKey, "odd.u16: size 3 is not a multiple of 2 bytes (uint16 tokens)"}},
      {"tokens", dir + "/odd.u32", {kKey, "odd.u32: size 6 is not a multiple of 4 bytes (uint32 tokens)"}},
      {"tokens", ok + "," + dir + "/empty.u16", {kKey, "empty.u16: the file is empty"}},
      {"text", dir + "/empty.txt", {kKey, "empty.txt: the file is empty"}},
      {"text", dir + "/nope*.u32", {kKey, "entry \"" + dir + "/nope*.u32\"", "matches no file"}},
      {"synthetic", ok, {kKey, "dataset \"synthetic\" is not read from files"}},
  };
  for (const Case& c : cases) {
    EXPECT_TRUE(ErrorHas(Open(c.kind, c.path).status(), c.error)) << c.kind << " " << c.path;
  }
  EXPECT_TRUE(ErrorHas(Open("tokens", ok, 0).status(), {kKey, "model.vocab_size must be positive"}));
}

TEST(TokenCorpusTest, GlobsExpandInListedOrderEachSortedBytewise) {
  const std::string dir = FreshDir();
  WriteBytes(dir + "/z.u16", LittleEndian({100}, 2));
  WriteBytes(dir + "/p-b.u16", LittleEndian({2}, 2));
  WriteBytes(dir + "/p-a.u16", LittleEndian({1}, 2));
  WriteBytes(dir + "/p-C.u16", LittleEndian({3}, 2));  // 'C' < 'a' bytewise
  WriteBytes(dir + "/q-1.u32", LittleEndian({11}, 4));
  WriteBytes(dir + "/q-0.u32", LittleEndian({10}, 4));
  auto c = Open("tokens", dir + "/z.u16," + dir + "/q-?.u32," + dir + "/p-[a-zA-Z].u16," + dir + "/z.u16");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Read(**c, 0, 7), (std::vector<std::int64_t>{100, 10, 11, 3, 1, 2, 100}));
}

TEST(TokenCorpusTest, AFileTruncatedWhileInUseIsAnErrorNotACrash) {
  const std::string dir = FreshDir();
  std::vector<std::uint64_t> values(1000);
  for (int i = 0; i < 1000; ++i) values[i] = i;
  WriteBytes(dir + "/t.u16", LittleEndian(values, 2));
  auto c = Open("tokens", dir + "/t.u16");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(Read(**c, 990, 3), (std::vector<std::int64_t>{990, 991, 992}));
  ASSERT_EQ(::truncate((dir + "/t.u16").c_str(), 1000), 0);  // 500 tokens left
  std::vector<std::int64_t> out(10);
  const absl::Status s = (*c)->Read(990, 10, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(ErrorHas(s, {kKey, dir + "/t.u16", "short read at byte offset 1980", "ends at byte 1000",
                           "was 2000 bytes when opened"}));
  EXPECT_EQ(Read(**c, 10, 2), (std::vector<std::int64_t>{10, 11}));
}

TEST(TokenCorpusTest, AboveTheOpenFileLimitEachReadReopensAndChecksTheSize) {
  const std::string dir = FreshDir();
  WriteBytes(dir + "/a.u16", LittleEndian({1, 2, 3}, 2));
  WriteBytes(dir + "/b.u16", LittleEndian({4, 5}, 2));
  auto c = Open("tokens", dir + "/a.u16," + dir + "/b.u16", 100, /*max_open=*/1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(Read(**c, 1, 4), (std::vector<std::int64_t>{2, 3, 4, 5}));
  WriteBytes(dir + "/b.u16", LittleEndian({4, 5, 6}, 2));
  std::vector<std::int64_t> out(2);
  EXPECT_TRUE(ErrorHas((*c)->Read(3, 2, out.data()), {kKey, dir + "/b.u16: 6 bytes, but it had 4", "changed"}));
  EXPECT_TRUE(ErrorHas((*c)->Read(4, 2, out.data()), {kKey, "tokens [4, 6) are outside the corpus [0, 5)"}));
  EXPECT_TRUE(ErrorHas((*c)->Read(-1, 1, out.data()), {"outside the corpus"}));
}

TEST(TokenCorpusTest, DescribeListsEightFilesThenCountsTheRest) {
  const std::string dir = FreshDir();
  std::string list;
  for (int i = 0; i < 11; ++i) {
    const std::string path = dir + "/f" + std::to_string(10 + i) + ".u16";
    WriteBytes(path, LittleEndian(std::vector<std::uint64_t>(static_cast<std::size_t>(i + 1), 7), 2));
    list += (i ? "," : "") + path;
  }
  auto c = Open("tokens", list);
  ASSERT_TRUE(c.ok());
  const std::string d = (*c)->Describe();
  EXPECT_EQ(d.rfind("11 files, 66 tokens:", 0), 0u) << d;
  EXPECT_NE(d.find(dir + "/f10.u16 (flat uint16, 1 tokens)"), std::string::npos) << d;
  EXPECT_NE(d.find("f17.u16 (flat uint16, 8 tokens) and 3 more"), std::string::npos) << d;
  EXPECT_EQ(d.find("f18.u16"), std::string::npos) << d;
}

}  // namespace
}  // namespace trainyard::data
