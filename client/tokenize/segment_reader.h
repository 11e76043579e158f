// Reading one input file as documents cut into bounded segments, in fixed-size chunks,
// so no file is ever held whole in memory.
//
// A file is one document; with `split_blank_lines`, an empty line ("\n" or "\r\n")
// ends a document instead, and the blank lines themselves belong to no document. A
// document is handed out as segments of at most `max_segment_bytes`: whole lines, as
// many as fit; a line longer than that is cut at the last UTF-8 character start at or
// before the limit (at the limit itself when the bytes there are not UTF-8). The
// segments depend only on the bytes and the two options, never on the chunk size, so
// a dataset is a pure function of its inputs. The bytes of a document's segments, in
// order, are the document.
//
// Thread contract: not thread-safe; one reader per file, used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainyard::tokenize {

struct SegmentOptions {
  bool split_blank_lines = false;
  std::size_t max_segment_bytes = 1 << 20;
  std::size_t chunk_bytes = 1 << 20;  // read size; changes nothing but the I/O
};

struct Segment {
  std::string text;             // never empty
  std::int64_t file_offset = 0;  // of text[0] in the file
  bool ends_document = false;    // the document's last segment
};

class SegmentReader {
 public:
  // Opens `path`; errors say "cannot open: <strerror>" without the path (the caller
  // names the input).
  static absl::StatusOr<std::unique_ptr<SegmentReader>> Open(const std::string& path,
                                                            const SegmentOptions& options);
  ~SegmentReader();
  SegmentReader(const SegmentReader&) = delete;
  SegmentReader& operator=(const SegmentReader&) = delete;

  // The next segment into *out: true, or false at the end of the file. A read error
  // ("cannot read at byte N: <strerror>").
  absl::StatusOr<bool> Next(Segment* out);
  // Bytes read from the file so far.
  std::int64_t bytes_read() const { return bytes_read_; }

 private:
  SegmentReader(int fd, const SegmentOptions& options) : fd_(fd), options_(options) {}
  absl::Status ReadChunk();
  void AddLine(std::string_view line, std::int64_t offset);
  void CutLongLine();
  void EndDocument();
  void Emit(std::string text, std::int64_t offset, bool ends_document);

  int fd_;
  SegmentOptions options_;
  std::int64_t bytes_read_ = 0;
  bool eof_ = false;
  std::string segment_;  // whole lines of the open document, not yet handed out
  std::int64_t segment_offset_ = 0;
  std::string line_;  // the line being read (no "\n" yet)
  std::int64_t line_offset_ = 0;
  std::deque<Segment> ready_;
  std::vector<char> buffer_;
};

// Where a segment of at most `max` bytes ends in `text` (text.size() > max): the last
// position at or before `max` that starts a UTF-8 character, at most 3 bytes back;
// `max` when none does (bytes that are not UTF-8). Always > 0 for max >= 4.
std::size_t CutPosition(std::string_view text, std::size_t max);

// The offset of the first byte of `text` that starts no well-formed UTF-8 sequence
// (overlong forms, surrogates, truncated sequences, code points past U+10FFFF), or
// std::string_view::npos when `text` is valid UTF-8.
std::size_t FirstInvalidUtf8(std::string_view text);

}  // namespace trainyard::tokenize
