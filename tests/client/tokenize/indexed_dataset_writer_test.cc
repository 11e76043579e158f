// IndexedDatasetWriter: the MMIDIDX bytes, byte for byte against a hand-built index;
// nothing under the output names until Commit; a spill file longer than one window.
#include "client/tokenize/indexed_dataset_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace trainyard::tokenize {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

// Little-endian bytes of `value`, written out by hand.
template <typename T>
std::string Le(T value) {
  std::string out;
  auto v = static_cast<std::uint64_t>(value);
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  return out;
}

TEST(IndexedDatasetWriterTest, WritesMegatronsLayout) {
  testing::TempDir dir;
  const std::string prefix = dir.path() + "/corpus";
  {
    absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w = IndexedDatasetWriter::Create(prefix, TokenDType::kUInt16);
    ASSERT_TRUE(w.ok()) << w.status();
    const int a[] = {1, 2, 65535};
    const int b[] = {7};
    ASSERT_TRUE((*w)->Append(a, 2).ok());
    ASSERT_TRUE((*w)->Append(a + 2, 1).ok());
    ASSERT_TRUE((*w)->EndDocument().ok());
    ASSERT_TRUE((*w)->Append(b, 1).ok());
    ASSERT_TRUE((*w)->EndDocument().ok());
    EXPECT_TRUE(Names(dir.path()).size() == 1) << "only the hidden .bin temporary before Commit";
    ASSERT_TRUE((*w)->Commit().ok());
  }
  EXPECT_EQ(Slurp(prefix + ".bin"), Le<std::uint16_t>(1) + Le<std::uint16_t>(2) + Le<std::uint16_t>(65535) +
                                        Le<std::uint16_t>(7));
  const std::string expected = std::string("MMIDIDX\0\0", 9) + Le<std::uint64_t>(1) + std::string(1, '\x08') +
                               Le<std::uint64_t>(2) + Le<std::uint64_t>(3) +       // sequences, documents + 1
                               Le<std::int32_t>(3) + Le<std::int32_t>(1) +         // lengths
                               Le<std::int64_t>(0) + Le<std::int64_t>(6) +         // byte pointers
                               Le<std::int64_t>(0) + Le<std::int64_t>(1) + Le<std::int64_t>(2);  // document index
  EXPECT_EQ(Slurp(prefix + ".idx"), expected);
  EXPECT_EQ(IndexedDatasetWriter::IndexBytes(2), static_cast<std::int64_t>(expected.size()));
  EXPECT_EQ(Names(dir.path()).size(), 2u) << "no temporary or spill file is left";
}

TEST(IndexedDatasetWriterTest, Int32PointersStepByFourBytes) {
  testing::TempDir dir;
  const std::string prefix = dir.path() + "/c";
  absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w = IndexedDatasetWriter::Create(prefix, TokenDType::kInt32);
  ASSERT_TRUE(w.ok());
  const int big[] = {70000, 1 << 24};
  ASSERT_TRUE((*w)->Append(big, 2).ok());
  ASSERT_TRUE((*w)->EndDocument().ok());
  ASSERT_TRUE((*w)->Append(big, 1).ok());
  ASSERT_TRUE((*w)->EndDocument().ok());
  ASSERT_TRUE((*w)->Commit().ok());
  const std::string idx = Slurp(prefix + ".idx");
  ASSERT_EQ(idx.size(), 34u + 2 * 4 + 2 * 8 + 3 * 8);
  EXPECT_EQ(idx[17], '\x04');
  EXPECT_EQ(idx.substr(34 + 8, 16), Le<std::int64_t>(0) + Le<std::int64_t>(8));
  EXPECT_EQ(Slurp(prefix + ".bin"), Le<std::int32_t>(70000) + Le<std::int32_t>(1 << 24) + Le<std::int32_t>(70000));
}

TEST(IndexedDatasetWriterTest, ManyDocumentsCrossSpillWindows) {
  testing::TempDir dir;
  const std::string prefix = dir.path() + "/many";
  constexpr int kDocs = 150001;  // past two 65536-length windows of the spill file
  absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w = IndexedDatasetWriter::Create(prefix, TokenDType::kUInt16);
  ASSERT_TRUE(w.ok());
  for (int d = 0; d < kDocs; ++d) {
    const int tokens[] = {d % 65536, 1, 2};
    ASSERT_TRUE((*w)->Append(tokens, 1 + d % 3).ok());
    ASSERT_TRUE((*w)->EndDocument().ok());
  }
  ASSERT_TRUE((*w)->Commit().ok());
  const std::string idx = Slurp(prefix + ".idx");
  ASSERT_EQ(static_cast<std::int64_t>(idx.size()), IndexedDatasetWriter::IndexBytes(kDocs));
  std::int64_t pointer = 0;
  for (int d = 0; d < kDocs; ++d) {
    std::int32_t length = 0;
    std::int64_t p = 0, doc = 0;
    std::memcpy(&length, idx.data() + 34 + 4 * d, 4);
    std::memcpy(&p, idx.data() + 34 + 4 * kDocs + 8 * d, 8);
    std::memcpy(&doc, idx.data() + 34 + 12 * kDocs + 8 * d, 8);
    ASSERT_EQ(length, 1 + d % 3) << d;
    ASSERT_EQ(p, pointer) << d;
    ASSERT_EQ(doc, d);
    pointer += 2 * length;
  }
  EXPECT_EQ(static_cast<std::int64_t>(Slurp(prefix + ".bin").size()), pointer);
}

TEST(IndexedDatasetWriterTest, NothingIsLeftWithoutCommit) {
  testing::TempDir dir;
  const std::string prefix = dir.path() + "/gone";
  {
    absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w = IndexedDatasetWriter::Create(prefix, TokenDType::kUInt16);
    ASSERT_TRUE(w.ok());
    const int t[] = {1};
    ASSERT_TRUE((*w)->Append(t, 1).ok());
    EXPECT_EQ((*w)->Commit().code(), absl::StatusCode::kFailedPrecondition) << "a document is open";
    ASSERT_TRUE((*w)->EndDocument().ok());
  }
  EXPECT_TRUE(Names(dir.path()).empty());
  absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> empty = IndexedDatasetWriter::Create(prefix, TokenDType::kUInt16);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->Commit().code(), absl::StatusCode::kFailedPrecondition) << "no document";
  EXPECT_EQ((*empty)->EndDocument().code(), absl::StatusCode::kFailedPrecondition) << "an empty document";
}

TEST(IndexedDatasetWriterTest, ATokenOutsideTheDTypeIsRefused) {
  testing::TempDir dir;
  absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w =
      IndexedDatasetWriter::Create(dir.path() + "/x", TokenDType::kUInt16);
  ASSERT_TRUE(w.ok());
  const int too_big[] = {65536};
  const absl::Status s = (*w)->Append(too_big, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("65536"), absl::string_view::npos) << s;
}

TEST(IndexedDatasetWriterTest, AMissingFolderIsAnError) {
  absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w =
      IndexedDatasetWriter::Create("/nonexistent-folder/x", TokenDType::kUInt16);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("/nonexistent-folder/"), absl::string_view::npos) << w.status();
}

}  // namespace
}  // namespace trainyard::tokenize
