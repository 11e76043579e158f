// SegmentReader: documents and segments of a file, whatever the chunk size; the UTF-8
// check that names the first bad byte.
#include "client/tokenize/segment_reader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace trainyard::tokenize {
namespace {

std::string WriteFile(const testing::TempDir& dir, const std::string& bytes) {
  const std::string path = dir.path() + "/input";
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::vector<Segment> ReadAll(const std::string& path, SegmentOptions options) {
  absl::StatusOr<std::unique_ptr<SegmentReader>> reader = SegmentReader::Open(path, options);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::vector<Segment> out;
  Segment s;
  while (true) {
    absl::StatusOr<bool> got = (*reader)->Next(&s);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok() || !*got) break;
    out.push_back(s);
  }
  return out;
}

// The documents the segments spell, each the concatenation of its segments.
std::vector<std::string> Documents(const std::vector<Segment>& segments) {
  std::vector<std::string> docs;
  std::string open;
  for (const Segment& s : segments) {
    open += s.text;
    if (s.ends_document) {
      docs.push_back(open);
      open.clear();
    }
  }
  EXPECT_TRUE(open.empty()) << "the last segment does not end a document";
  return docs;
}

// Lines of many lengths, some longer than the segment limit, with 2- and 3-byte
// characters, and a last line without a newline.
std::string MixedText() {
  std::string text;
  for (int i = 0; i < 200; ++i) {
    std::string line;
    const int len = (i * 37) % 150;
    for (int k = 0; k < len; ++k) line += (k % 5 == 0) ? "\xc3\xa9" : (k % 7 == 0 ? "\xe2\x82\xac" : "x");
    text += line + "\n";
    if (i % 17 == 0) text += "\n";  // a blank line now and then
  }
  return text + "tail without newline";
}

TEST(SegmentReaderTest, AFileIsOneDocumentAndTheSegmentsSpellIt) {
  testing::TempDir dir;
  const std::string text = MixedText();
  SegmentOptions options;
  options.max_segment_bytes = 64;
  const std::vector<Segment> segments = ReadAll(WriteFile(dir, text), options);
  ASSERT_EQ(Documents(segments), std::vector<std::string>{text});
  std::int64_t offset = 0;
  for (const Segment& s : segments) {
    EXPECT_EQ(s.file_offset, offset);
    EXPECT_LE(s.text.size(), 64u);
    EXPECT_FALSE(s.text.empty());
    // Cut after a newline, at the end, or inside a line longer than the limit: never
    // inside a character.
    EXPECT_EQ(FirstInvalidUtf8(s.text), std::string_view::npos) << "at " << s.file_offset;
    offset += static_cast<std::int64_t>(s.text.size());
  }
  EXPECT_EQ(offset, static_cast<std::int64_t>(text.size()));
}

TEST(SegmentReaderTest, SegmentsDoNotDependOnTheChunkSize) {
  testing::TempDir dir;
  const std::string path = WriteFile(dir, MixedText());
  for (const bool blank : {false, true}) {
    SegmentOptions reference;
    reference.max_segment_bytes = 64;
    reference.split_blank_lines = blank;
    reference.chunk_bytes = 1 << 20;
    const std::vector<Segment> expected = ReadAll(path, reference);
    for (const std::size_t chunk : {1, 2, 3, 7, 63, 64, 65, 1000}) {
      SegmentOptions options = reference;
      options.chunk_bytes = chunk;
      const std::vector<Segment> got = ReadAll(path, options);
      ASSERT_EQ(got.size(), expected.size()) << "chunk " << chunk << " blank " << blank;
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].text, expected[i].text) << "segment " << i << ", chunk " << chunk;
        EXPECT_EQ(got[i].file_offset, expected[i].file_offset);
        EXPECT_EQ(got[i].ends_document, expected[i].ends_document);
      }
    }
  }
}

TEST(SegmentReaderTest, BlankLinesEndDocumentsAndAreDropped) {
  testing::TempDir dir;
  const std::string text = "\n\na\nb\n\n\nc\r\n\r\nd  \n \n e";
  SegmentOptions options;
  options.split_blank_lines = true;
  const std::vector<Segment> segments = ReadAll(WriteFile(dir, text), options);
  // " \n" holds a space: not empty, so not a boundary.
  EXPECT_EQ(Documents(segments), (std::vector<std::string>{"a\nb\n", "c\r\n", "d  \n \n e"}));
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_EQ(segments[0].file_offset, 2);
  EXPECT_EQ(segments[1].file_offset, 8);
  EXPECT_EQ(segments[2].file_offset, 13);
}

TEST(SegmentReaderTest, ALongLineIsCutAtCharacterStarts) {
  testing::TempDir dir;
  std::string line;
  for (int i = 0; i < 100; ++i) line += "\xe2\x82\xac";  // 300 bytes of 3-byte characters
  SegmentOptions options;
  options.max_segment_bytes = 64;
  const std::vector<Segment> segments = ReadAll(WriteFile(dir, "ab\n" + line), options);
  ASSERT_EQ(Documents(segments), std::vector<std::string>{"ab\n" + line});
  // "ab\n" and the line do not fit one segment together; the line is cut every 63 bytes
  // (21 characters), the largest multiple of 3 within 64.
  ASSERT_EQ(segments.size(), 6u);
  EXPECT_EQ(segments[0].text, "ab\n");
  for (std::size_t i = 1; i < 5; ++i) EXPECT_EQ(segments[i].text.size(), 63u) << i;
  EXPECT_EQ(segments[5].text.size(), 300u - 4 * 63);
}

TEST(SegmentReaderTest, AnEmptyFileHasNoDocument) {
  testing::TempDir dir;
  EXPECT_TRUE(ReadAll(WriteFile(dir, ""), SegmentOptions{}).empty());
  SegmentOptions blank;
  blank.split_blank_lines = true;
  EXPECT_TRUE(ReadAll(WriteFile(dir, "\n\n\r\n"), blank).empty());
}

TEST(SegmentReaderTest, AMissingFileIsAnError) {
  absl::StatusOr<std::unique_ptr<SegmentReader>> reader = SegmentReader::Open("/nonexistent/x", SegmentOptions{});
  ASSERT_FALSE(reader.ok());
  EXPECT_NE(reader.status().message().find("cannot open: No such file"), std::string::npos) << reader.status();
}

TEST(SegmentUtf8Test, FirstInvalidByte) {
  constexpr std::size_t kValid = std::string_view::npos;
  EXPECT_EQ(FirstInvalidUtf8(""), kValid);
  EXPECT_EQ(FirstInvalidUtf8("plain ascii\n"), kValid);
  EXPECT_EQ(FirstInvalidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), kValid);
  EXPECT_EQ(FirstInvalidUtf8("ab\xff"), 2u);
  EXPECT_EQ(FirstInvalidUtf8("\xc0\xaf"), 0u);          // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("x\xe0\x80\xaf"), 1u);     // overlong 3-byte
  EXPECT_EQ(FirstInvalidUtf8("\xed\xa0\x80"), 0u);      // surrogate U+D800
  EXPECT_EQ(FirstInvalidUtf8("a\xe2\x82"), 1u);         // truncated
  EXPECT_EQ(FirstInvalidUtf8("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("ok\x80"), 2u);            // a lone continuation byte
}

TEST(SegmentUtf8Test, CutPositionStepsBackToACharacterStart) {
  EXPECT_EQ(CutPosition("abcdefgh", 4), 4u);
  EXPECT_EQ(CutPosition("abc\xe2\x82\xac", 4), 3u);  // byte 4 continues the euro sign
  EXPECT_EQ(CutPosition("\x80\x80\x80\x80\x80\x80", 4), 4u);  // not UTF-8: at the limit
}

}  // namespace
}  // namespace trainyard::tokenize
