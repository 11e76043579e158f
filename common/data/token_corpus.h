// The training corpus: the token streams of every file of a dataset_path, concatenated in
// corpus order (corpus_paths.h), read on demand and never held in memory.
//
// Open() resolves the paths, opens each file and checks what can be checked without
// reading the tokens: a file or shard with no tokens, a flat file whose size is not a
// multiple of its element width, and the whole .idx of every indexed dataset
// (indexed_index.h, a streaming pass). Tokens are checked as they are read: Read()
// converts each element to an id and refuses one outside [0, vocab_size) (or negative,
// or a non-integral float) naming the file, the byte offset and the value. Reads are
// pread(2) in windows of at most kReadWindowBytes into a buffer of the call; the corpus
// itself holds O(files) memory (a path, a few counts and an open descriptor per file).
// Above max_open_files files, each read opens its file and checks its size again
// instead of holding every descriptor.
//
// Every error's message starts with the dataset key ("training.dataset_path: ...").
// Thread contract: immutable after Open(); Read() is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/data/byte_source.h"
#include "common/data/corpus_paths.h"

namespace trainyard::data {

inline constexpr std::size_t kReadWindowBytes = std::size_t{1} << 20;

struct CorpusOptions {
  std::string kind;       // "text" | "tokens"
  std::string path_list;  // the dataset_path value
  std::int64_t vocab_size = 0;
  std::string key;  // the dataset_path key, first in every error
  std::size_t max_open_files = 256;
};

struct CorpusFile {
  CorpusFileSpec spec;
  std::int64_t tokens = 0;
  std::int64_t documents = -1;  // indexed datasets; -1: the format has no documents
  std::int64_t first_token = 0;  // where the file starts in the corpus stream
};

class TokenCorpus {
 public:
  static absl::StatusOr<std::unique_ptr<TokenCorpus>> Open(const CorpusOptions& options);

  const std::vector<CorpusFile>& files() const { return files_; }
  std::int64_t total_tokens() const { return total_tokens_; }
  // Documents of the indexed files (flat and text files have none).
  std::int64_t total_documents() const { return total_documents_; }
  std::int64_t vocab_size() const { return vocab_size_; }
  const std::string& key() const { return key_; }

  // Tokens [first, first + count) of the corpus stream into `out`, which may span files.
  // INVALID_ARGUMENT on a range outside [0, total_tokens()) or an invalid token,
  // DATA_LOSS on a file that shrank, INTERNAL on an I/O error.
  absl::Status Read(std::int64_t first, std::int64_t count, std::int64_t* out) const;

  // One line for the start-up log: the totals, then each file (format, dtype, documents,
  // tokens), at most `max_listed` of them, then "and N more".
  std::string Describe(std::size_t max_listed = 8) const;

 private:
  TokenCorpus() = default;
  absl::Status ReadFromFile(std::size_t file, std::int64_t first, std::int64_t count, std::int64_t* out) const;

  std::string key_;
  std::int64_t vocab_size_ = 0;
  std::vector<CorpusFile> files_;
  std::vector<std::uint64_t> file_bytes_;          // size of each token file at Open()
  std::vector<std::unique_ptr<PreadFile>> open_;   // parallel to files_, or empty (opened per read)
  std::int64_t total_tokens_ = 0;
  std::int64_t total_documents_ = 0;
};

}  // namespace trainyard::data
