// Writes a Megatron-LM indexed dataset, the layout of megatron/core/datasets/
// indexed_dataset.py's _IndexWriter (little-endian):
//
//   PREFIX.bin  every document's tokens, back to back, as uint16 or int32
//   PREFIX.idx  b"MMIDIDX\x00\x00", uint64 version 1, uint8 dtype code (8 uint16,
//               4 int32), uint64 sequence_count, uint64 document_count,
//               int32 sequence_lengths[sequence_count] (tokens),
//               int64 sequence_pointers[sequence_count] (byte offsets into .bin),
//               int64 document_indices[document_count]
//
// One sequence per document, so document_indices is 0, 1, ..., sequence_count and
// document_count = documents + 1.
//
// Streaming: tokens go to a temporary .bin as they come (a 1 MiB buffer); each
// document's length goes to an anonymous spill file beside the output (4 bytes a
// document, never in memory), which Commit reads back twice to write the .idx. So
// memory does not grow with the corpus.
//
// Crash safety: both files are written under hidden temporary names
// (.NAME.tmp-XXXXXX, AtomicFileWriter) and renamed into place only by Commit, after
// any older PREFIX.bin is removed, the .bin last: a run that dies leaves any earlier
// dataset under PREFIX untouched, or (killed inside Commit) a PREFIX.idx without its
// PREFIX.bin, which a reader refuses naming the missing file; never a .bin without an
// index (a reader would take it for flat nanoGPT uint16) or an index naming another
// .bin. Destroyed without Commit, the temporary files are removed.
//
// Thread contract: not thread-safe; one writer per output, used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/file_io.h"

namespace trainyard::tokenize {

// The dtype codes of Megatron's DType enum that a token stream can have here.
enum class TokenDType : std::uint8_t { kInt32 = 4, kUInt16 = 8 };
inline int TokenWidth(TokenDType dtype) { return dtype == TokenDType::kUInt16 ? 2 : 4; }
inline const char* TokenDTypeName(TokenDType dtype) { return dtype == TokenDType::kUInt16 ? "uint16" : "int32"; }

// The largest number of tokens one document may have: sequence_lengths are int32.
inline constexpr std::int64_t kMaxDocumentTokens = 2147483647;

class IndexedDatasetWriter {
 public:
  // Starts PREFIX.bin and the spill file. The folder of `prefix` must exist.
  static absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> Create(const std::string& prefix, TokenDType dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends tokens to the open document. An id outside the dtype's range is an
  // INTERNAL error (the caller chose the dtype from the vocabulary).
  absl::Status Append(const int* tokens, std::size_t count);
  // Closes the open document. FAILED_PRECONDITION for an empty document;
  // OUT_OF_RANGE past kMaxDocumentTokens (checked as tokens are appended).
  absl::Status EndDocument();
  // Tokens in the open document so far.
  std::int64_t open_document_tokens() const { return open_tokens_; }

  // Writes PREFIX.idx and puts the dataset in place: removes an older PREFIX.idx,
  // removes an older PREFIX.bin, commits each of `also` (a model file that belongs with
  // the dataset), then PREFIX.idx, then PREFIX.bin. FAILED_PRECONDITION when a document is still open or
  // there is none.
  absl::Status Commit(std::vector<AtomicFileWriter>* also = nullptr);

  std::int64_t documents() const { return documents_; }
  std::int64_t tokens() const { return tokens_; }
  const std::string& bin_path() const { return bin_path_; }
  const std::string& idx_path() const { return idx_path_; }
  // The .idx's size for `documents` documents: 34 + 4n + 8n + 8(n + 1) bytes.
  static std::int64_t IndexBytes(std::int64_t documents) { return 34 + 20 * documents + 8; }

 private:
  IndexedDatasetWriter(std::string prefix, TokenDType dtype, AtomicFileWriter bin, int spill_fd);
  absl::Status FlushBin();
  absl::Status FlushSpill();
  absl::Status WriteIndex(AtomicFileWriter& idx);

  std::string bin_path_, idx_path_;
  TokenDType dtype_;
  AtomicFileWriter bin_;
  std::string bin_buffer_;
  int spill_fd_;
  std::vector<std::int32_t> spill_buffer_;
  std::int64_t spill_written_ = 0;  // lengths in the spill file
  std::int64_t open_tokens_ = 0;
  std::int64_t documents_ = 0;
  std::int64_t tokens_ = 0;
};

}  // namespace trainyard::tokenize
