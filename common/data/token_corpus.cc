#include "common/data/token_corpus.h"

#include <algorithm>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/data/indexed_index.h"

namespace trainyard::data {
namespace {

absl::Status WithKey(const std::string& key, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(key, ": ", s.message()));
}

// Opens and sizes one file of the corpus; validates an indexed dataset's .idx.
absl::StatusOr<CorpusFile> Inspect(const CorpusFileSpec& spec, const std::string& key,
                                   std::unique_ptr<PreadFile>* opened) {
  auto file = PreadFile::Open(spec.path);
  if (!file.ok()) return WithKey(key, file.status());
  CorpusFile f;
  f.spec = spec;
  const std::uint64_t bytes = (*file)->size();
  if (spec.format == CorpusFormat::kIndexed) {
    auto idx = PreadFile::Open(spec.index_path);
    if (!idx.ok()) return WithKey(key, idx.status());
    auto info = ValidateIndexedIndex(**idx, bytes, spec.path);
    if (!info.ok()) return WithKey(key, info.status());
    f.spec.dtype = info->dtype;
    f.tokens = static_cast<std::int64_t>(info->tokens);
    f.documents = static_cast<std::int64_t>(info->documents);
    if (f.tokens == 0) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": ", spec.index_path, ": the indexed dataset holds no tokens (",
                                                     info->sequences, " sequences, ", info->documents,
                                                     " documents): an empty shard"));
    }
  } else {
    const int width = TokenDtypeSize(spec.dtype);
    if (bytes == 0) return absl::InvalidArgumentError(absl::StrCat(key, ": ", spec.path, ": the file is empty"));
    if (bytes % width != 0) {
      return absl::InvalidArgumentError(absl::StrCat(key, ": ", spec.path, ": size ", bytes,
                                                     " is not a multiple of ", width, " bytes (",
                                                     TokenDtypeName(spec.dtype), " tokens)"));
    }
    f.tokens = static_cast<std::int64_t>(bytes / width);
  }
  *opened = std::move(*file);
  return f;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenCorpus>> TokenCorpus::Open(const CorpusOptions& options) {
  if (options.vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(options.key, ": model.vocab_size must be positive, got ",
                                                   options.vocab_size));
  }
  TY_ASSIGN_OR_RETURN(std::vector<CorpusFileSpec> specs,
                      ResolveDatasetPath(options.kind, options.path_list, options.key));
  std::unique_ptr<TokenCorpus> corpus(new TokenCorpus());
  corpus->key_ = options.key;
  corpus->vocab_size_ = options.vocab_size;
  const bool hold = specs.size() <= options.max_open_files;
  for (const CorpusFileSpec& spec : specs) {
    std::unique_ptr<PreadFile> opened;
    TY_ASSIGN_OR_RETURN(CorpusFile f, Inspect(spec, options.key, &opened));
    f.first_token = corpus->total_tokens_;
    if (f.tokens > std::numeric_limits<std::int64_t>::max() - corpus->total_tokens_) {
      return absl::InvalidArgumentError(options.key + ": the corpus holds more than 2^63 tokens");
    }
    corpus->total_tokens_ += f.tokens;
    if (f.documents > 0) corpus->total_documents_ += f.documents;
    corpus->file_bytes_.push_back(opened->size());
    if (hold) corpus->open_.push_back(std::move(opened));
    corpus->files_.push_back(std::move(f));
  }
  return corpus;
}

absl::Status TokenCorpus::Read(std::int64_t first, std::int64_t count, std::int64_t* out) const {
  if (first < 0 || count < 0 || count > total_tokens_ - first) {
    return absl::InvalidArgumentError(absl::StrCat(key_, ": tokens [", first, ", ", first + count,
                                                   ") are outside the corpus [0, ", total_tokens_, ")"));
  }
  // The last file that starts at or before `first`.
  auto it = std::upper_bound(files_.begin(), files_.end(), first,
                             [](std::int64_t t, const CorpusFile& f) { return t < f.first_token; });
  std::size_t file = static_cast<std::size_t>(it - files_.begin()) - 1;
  while (count > 0) {
    const CorpusFile& f = files_[file];
    const std::int64_t local = first - f.first_token;
    const std::int64_t n = std::min(count, f.tokens - local);
    TY_RETURN_IF_ERROR(ReadFromFile(file, local, n, out));
    first += n;
    count -= n;
    out += n;
    ++file;
  }
  return absl::OkStatus();
}

absl::Status TokenCorpus::ReadFromFile(std::size_t file, std::int64_t first, std::int64_t count,
                                       std::int64_t* out) const {
  const CorpusFile& f = files_[file];
  const PreadFile* source = open_.empty() ? nullptr : open_[file].get();
  std::unique_ptr<PreadFile> reopened;
  if (source == nullptr) {
    auto opened = PreadFile::Open(f.spec.path);
    if (!opened.ok()) return WithKey(key_, opened.status());
    reopened = std::move(*opened);
    if (reopened->size() != file_bytes_[file]) {
      return absl::DataLossError(absl::StrCat(key_, ": ", f.spec.path, ": ", reopened->size(),
                                              " bytes, but it had ", file_bytes_[file],
                                              " when the corpus was opened (changed while in use)"));
    }
    source = reopened.get();
  }
  const int width = TokenDtypeSize(f.spec.dtype);
  const std::int64_t window = static_cast<std::int64_t>(kReadWindowBytes) / width;
  std::vector<unsigned char> buffer(static_cast<std::size_t>(std::min(count, window) * width));
  for (std::int64_t done = 0; done < count;) {
    const std::int64_t n = std::min(window, count - done);
    const std::uint64_t offset = static_cast<std::uint64_t>(first + done) * width;
    absl::Status read = source->ReadAt(offset, static_cast<std::size_t>(n * width), buffer.data());
    if (!read.ok()) return WithKey(key_, read);
    if (auto bad = DecodeTokens(f.spec.dtype, buffer.data(), n, vocab_size_, out + done)) {
      std::string message = absl::StrCat(
          key_, ": ", f.spec.path, ": token ", bad->value, " (", TokenDtypeName(f.spec.dtype), ") at byte offset ",
          offset + static_cast<std::uint64_t>(bad->index) * width, " is not a token id: ids are integers in [0, ",
          "model.vocab_size ", vocab_size_, ")");
      // An id past the vocabulary is the model's to fix, not the file's: say what to set.
      // Later tokens may be larger still, and the tokenizer that wrote the file printed
      // the exact size ("needs model.vocab_size >= N").
      if (std::int64_t id = 0; absl::SimpleAtoi(bad->value, &id) && id >= vocab_size_) {
        absl::StrAppend(&message, "; set model.vocab_size to at least ", id + 1,
                        ", or to the size trainyard-tokenize printed for this corpus (\"needs model.vocab_size >= N\")");
      }
      return absl::InvalidArgumentError(std::move(message));
    }
    done += n;
  }
  return absl::OkStatus();
}

std::string TokenCorpus::Describe(std::size_t max_listed) const {
  std::string s = absl::StrCat(files_.size(), files_.size() == 1 ? " file, " : " files, ", total_tokens_, " tokens");
  if (total_documents_ > 0) absl::StrAppend(&s, ", ", total_documents_, " documents");
  absl::StrAppend(&s, ":");
  for (std::size_t i = 0; i < files_.size() && i < max_listed; ++i) {
    const CorpusFile& f = files_[i];
    absl::StrAppend(&s, i == 0 ? " " : ", ", f.spec.format == CorpusFormat::kIndexed ? f.spec.index_path : f.spec.path,
                    " (", CorpusFormatName(f.spec.format), " ", TokenDtypeName(f.spec.dtype));
    if (f.documents >= 0) absl::StrAppend(&s, ", ", f.documents, " documents");
    absl::StrAppend(&s, ", ", f.tokens, " tokens)");
  }
  if (files_.size() > max_listed) absl::StrAppend(&s, " and ", files_.size() - max_listed, " more");
  return s;
}

}  // namespace trainyard::data
