#include "client/tokenize/segment_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace trainyard::tokenize {

std::size_t CutPosition(std::string_view text, std::size_t max) {
  for (std::size_t p = max; p > 0 && p + 4 > max; --p) {
    if ((static_cast<unsigned char>(text[p]) & 0xC0) != 0x80) return p;
  }
  return max;
}

std::size_t FirstInvalidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return i;
    }
    if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
    for (std::size_t k = 2; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

absl::StatusOr<std::unique_ptr<SegmentReader>> SegmentReader::Open(const std::string& path,
                                                                 const SegmentOptions& options) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open: ", std::strerror(errno)));
  // Read once front to back: let the kernel read ahead generously.
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return std::unique_ptr<SegmentReader>(new SegmentReader(fd, options));
}

SegmentReader::~SegmentReader() { ::close(fd_); }

absl::StatusOr<bool> SegmentReader::Next(Segment* out) {
  while (ready_.empty() && !eof_) {
    if (absl::Status s = ReadChunk(); !s.ok()) return s;
  }
  if (ready_.empty()) return false;
  *out = std::move(ready_.front());
  ready_.pop_front();
  return true;
}

absl::Status SegmentReader::ReadChunk() {
  buffer_.resize(options_.chunk_bytes);
  std::vector<char>& buffer = buffer_;
  ssize_t n;
  do {
    n = ::read(fd_, buffer.data(), buffer.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return absl::InternalError(absl::StrCat("cannot read at byte ", bytes_read_, ": ", std::strerror(errno)));
  }
  const std::int64_t base = bytes_read_;
  bytes_read_ += n;
  if (n == 0) {
    eof_ = true;
    if (!line_.empty()) {  // a last line without "\n"
      AddLine(line_, line_offset_);
      line_.clear();
    }
    EndDocument();
    return absl::OkStatus();
  }
  const std::string_view data(buffer.data(), static_cast<std::size_t>(n));
  std::size_t pos = 0;
  while (pos < data.size()) {
    const std::size_t newline = data.find('\n', pos);
    if (line_.empty()) line_offset_ = base + static_cast<std::int64_t>(pos);
    if (newline == std::string_view::npos) {
      line_.append(data.substr(pos));
      CutLongLine();
      break;
    }
    const std::string_view rest = data.substr(pos, newline + 1 - pos);
    if (line_.empty()) {
      AddLine(rest, line_offset_);
    } else {
      line_.append(rest);
      AddLine(line_, line_offset_);
      line_.clear();
    }
    pos = newline + 1;
  }
  return absl::OkStatus();
}

void SegmentReader::AddLine(std::string_view line, std::int64_t offset) {
  if (options_.split_blank_lines && (line == "\n" || line == "\r\n")) {
    EndDocument();
    return;
  }
  const std::size_t max = options_.max_segment_bytes;
  if (!segment_.empty() && segment_.size() + line.size() > max) {
    Emit(std::move(segment_), segment_offset_, false);
    segment_.clear();
  }
  while (line.size() > max) {
    const std::size_t cut = CutPosition(line, max);
    Emit(std::string(line.substr(0, cut)), offset, false);
    line.remove_prefix(cut);
    offset += static_cast<std::int64_t>(cut);
  }
  if (segment_.empty()) segment_offset_ = offset;
  segment_.append(line);
}

// A line still being read that is already over the limit is cut now, exactly as
// AddLine would cut it once complete (the cuts look only at its first bytes), so a
// file that is one huge line is never held whole.
void SegmentReader::CutLongLine() {
  const std::size_t max = options_.max_segment_bytes;
  if (line_.size() <= max) return;
  if (!segment_.empty()) {
    Emit(std::move(segment_), segment_offset_, false);
    segment_.clear();
  }
  std::size_t done = 0;
  while (line_.size() - done > max) {
    const std::string_view rest = std::string_view(line_).substr(done);
    const std::size_t cut = CutPosition(rest, max);
    Emit(std::string(rest.substr(0, cut)), line_offset_ + static_cast<std::int64_t>(done), false);
    done += cut;
  }
  line_.erase(0, done);
  line_offset_ += static_cast<std::int64_t>(done);
}

// A document with content always ends with bytes in segment_: AddLine leaves at least
// one byte of its line there, and CutLongLine leaves the rest of its line in line_,
// which reaches AddLine at the line's end. So the end mark rides on a real segment.
void SegmentReader::EndDocument() {
  if (segment_.empty()) return;
  Emit(std::move(segment_), segment_offset_, true);
  segment_.clear();
}

void SegmentReader::Emit(std::string text, std::int64_t offset, bool ends_document) {
  ready_.push_back(Segment{std::move(text), offset, ends_document});
}

}  // namespace trainyard::tokenize
