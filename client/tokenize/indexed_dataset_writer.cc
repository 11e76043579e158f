#include "client/tokenize/indexed_dataset_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace trainyard::tokenize {
namespace {

constexpr std::size_t kFlushBytes = 1 << 20;
constexpr std::size_t kSpillWindow = 1 << 16;  // lengths per read of the spill file
constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

// Hidden unique temporary names: two runs writing the same prefix never share a file.
AtomicFileWriter::Options UniqueTemp() {
  AtomicFileWriter::Options options;
  options.unique_temp_name = true;
  return options;
}

template <typename T>
void PutLittleEndian(std::string* out, T value) {
  using U = std::make_unsigned_t<T>;
  U v = static_cast<U>(value);
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out->push_back(static_cast<char>(v & 0xFF));
    v = static_cast<U>(v >> 8);
  }
}

// An unnamed file in `dir` (O_TMPFILE), or one unlinked at once where the file system
// has no O_TMPFILE: either way nothing is left behind by a run that dies.
absl::StatusOr<int> OpenSpillFile(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  std::string name = dir + "/.trainyard-tokenize-lengths-XXXXXX";
  fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create a spill file in ", dir, ": ", std::strerror(errno)));
  }
  ::unlink(name.c_str());
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::Create(const std::string& prefix,
                                                                                 TokenDType dtype) {
  TY_ASSIGN_OR_RETURN(AtomicFileWriter bin,
                      AtomicFileWriter::Create(prefix + ".bin", UniqueTemp()));
  TY_ASSIGN_OR_RETURN(int spill_fd, OpenSpillFile(DirectoryOf(prefix)));
  return std::unique_ptr<IndexedDatasetWriter>(new IndexedDatasetWriter(prefix, dtype, std::move(bin), spill_fd));
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, TokenDType dtype, AtomicFileWriter bin, int spill_fd)
    : bin_path_(prefix + ".bin"), idx_path_(prefix + ".idx"), dtype_(dtype), bin_(std::move(bin)), spill_fd_(spill_fd) {
  bin_buffer_.reserve(kFlushBytes + 4096);
}

IndexedDatasetWriter::~IndexedDatasetWriter() { ::close(spill_fd_); }

absl::Status IndexedDatasetWriter::Append(const int* tokens, std::size_t count) {
  if (open_tokens_ + static_cast<std::int64_t>(count) > kMaxDocumentTokens) {
    return absl::OutOfRangeError(absl::StrCat("document ", documents_, " has more than ", kMaxDocumentTokens,
                                              " tokens, the limit of the .idx's int32 sequence lengths"));
  }
  const std::int64_t max_id = dtype_ == TokenDType::kUInt16 ? 65535 : kMaxDocumentTokens;
  for (std::size_t i = 0; i < count; ++i) {
    const int t = tokens[i];
    if (t < 0 || t > max_id) {
      return absl::InternalError(
          absl::StrCat("token id ", t, " does not fit the dataset's dtype ", TokenDTypeName(dtype_)));
    }
    if (dtype_ == TokenDType::kUInt16) {
      PutLittleEndian(&bin_buffer_, static_cast<std::uint16_t>(t));
    } else {
      PutLittleEndian(&bin_buffer_, static_cast<std::int32_t>(t));
    }
    if (bin_buffer_.size() >= kFlushBytes) TY_RETURN_IF_ERROR(FlushBin());
  }
  open_tokens_ += static_cast<std::int64_t>(count);
  tokens_ += static_cast<std::int64_t>(count);
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::EndDocument() {
  if (open_tokens_ == 0) return absl::FailedPreconditionError("an empty document has no place in the dataset");
  spill_buffer_.push_back(static_cast<std::int32_t>(open_tokens_));
  open_tokens_ = 0;
  ++documents_;
  if (spill_buffer_.size() >= kSpillWindow) return FlushSpill();
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::FlushBin() {
  TY_RETURN_IF_ERROR(bin_.Append(bin_buffer_));
  bin_buffer_.clear();
  return absl::OkStatus();
}

// The spill file holds host-order int32s: it is read back only by this process.
absl::Status IndexedDatasetWriter::FlushSpill() {
  const char* p = reinterpret_cast<const char*>(spill_buffer_.data());
  std::size_t left = spill_buffer_.size() * sizeof(std::int32_t);
  while (left > 0) {
    const ssize_t n = ::write(spill_fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(absl::StrCat("cannot write the document lengths' spill file beside ", bin_path_,
                                              ": ", n < 0 ? std::strerror(errno) : "wrote nothing"));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  spill_written_ += static_cast<std::int64_t>(spill_buffer_.size());
  spill_buffer_.clear();
  return absl::OkStatus();
}

absl::Status IndexedDatasetWriter::WriteIndex(AtomicFileWriter& idx) {
  std::string out;
  out.reserve(kFlushBytes + 4096);
  out.append(kMagic, sizeof(kMagic));
  PutLittleEndian(&out, std::uint64_t{1});  // version
  out.push_back(static_cast<char>(dtype_));
  PutLittleEndian(&out, static_cast<std::uint64_t>(documents_));      // sequence_count
  PutLittleEndian(&out, static_cast<std::uint64_t>(documents_ + 1));  // document_count
  const auto flush_if_full = [&]() -> absl::Status {
    if (out.size() < kFlushBytes) return absl::OkStatus();
    TY_RETURN_IF_ERROR(idx.Append(out));
    out.clear();
    return absl::OkStatus();
  };
  // Two passes over the spill file: the lengths, then the pointers they imply.
  std::vector<std::int32_t> window(kSpillWindow);
  std::int64_t pointer = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (std::int64_t first = 0; first < documents_; first += static_cast<std::int64_t>(kSpillWindow)) {
      const std::size_t count = static_cast<std::size_t>(std::min<std::int64_t>(kSpillWindow, documents_ - first));
      const std::size_t bytes = count * sizeof(std::int32_t);
      std::size_t got = 0;
      while (got < bytes) {
        const ssize_t n = ::pread(spill_fd_, reinterpret_cast<char*>(window.data()) + got, bytes - got,
                                  static_cast<off_t>(first * 4 + static_cast<std::int64_t>(got)));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          return absl::InternalError(absl::StrCat("cannot read back the document lengths' spill file beside ",
                                                  bin_path_, ": ", n < 0 ? std::strerror(errno) : "short read"));
        }
        got += static_cast<std::size_t>(n);
      }
      for (std::size_t i = 0; i < count; ++i) {
        if (pass == 0) {
          PutLittleEndian(&out, window[i]);
        } else {
          PutLittleEndian(&out, pointer);
          pointer += static_cast<std::int64_t>(window[i]) * TokenWidth(dtype_);
        }
        TY_RETURN_IF_ERROR(flush_if_full());
      }
    }
  }
  for (std::int64_t d = 0; d <= documents_; ++d) {
    PutLittleEndian(&out, d);
    TY_RETURN_IF_ERROR(flush_if_full());
  }
  return idx.Append(out);
}

absl::Status IndexedDatasetWriter::Commit(std::vector<AtomicFileWriter>* also) {
  if (open_tokens_ != 0) return absl::FailedPreconditionError("the last document was not ended");
  if (documents_ == 0) return absl::FailedPreconditionError("the dataset has no document");
  TY_RETURN_IF_ERROR(FlushBin());
  TY_RETURN_IF_ERROR(FlushSpill());
  TY_ASSIGN_OR_RETURN(AtomicFileWriter idx,
                      AtomicFileWriter::Create(idx_path_, UniqueTemp()));
  TY_RETURN_IF_ERROR(WriteIndex(idx));
  // The .bin goes last, after its .idx, and any older .bin is removed first: a crash
  // between the renames leaves an index without its .bin (a reader refuses it, naming
  // the missing file), never a .bin without an index, which a reader would take for a
  // flat uint16 (nanoGPT) file, and never an index naming an older .bin.
  if (::unlink(bin_path_.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("cannot remove the older ", bin_path_, ": ", std::strerror(errno)));
  }
  TY_RETURN_IF_ERROR(FsyncPath(DirectoryOf(idx_path_), /*directory=*/true));
  if (also != nullptr) {
    for (AtomicFileWriter& w : *also) TY_RETURN_IF_ERROR(w.Commit());
  }
  TY_RETURN_IF_ERROR(idx.Commit());
  return bin_.Commit();
}

}  // namespace trainyard::tokenize
