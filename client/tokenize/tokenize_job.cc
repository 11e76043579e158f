#include "client/tokenize/tokenize_job.h"

#include <sys/stat.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "client/tokenize/batch_encoder.h"
#include "client/tokenize/hf_job.h"
#include "client/tokenize/hf_tokenizer.h"
#include "client/tokenize/indexed_dataset_writer.h"
#include "client/tokenize/input_files.h"
#include "client/tokenize/input_text.h"
#include "client/tokenize/progress.h"
#include "client/tokenize/segment_reader.h"
#include "client/tokenize/spm_job.h"
#include "client/tokenize/spm_model.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/text.h"

namespace trainyard::tokenize {
namespace {

// Encode batches: this many bytes per thread before the threads run.
constexpr std::size_t kBatchBytesPerThread = std::size_t{4} << 20;

// --eos: auto (-2 here), none (-1) or an id.
absl::StatusOr<int> ParseEos(const std::string& value) {
  if (value == "auto") return -2;
  if (value == "none") return -1;
  int id = 0;
  if (!absl::SimpleAtoi(value, &id) || id < 0 || id >= (1 << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--eos ", Quoted(value), ": expected auto, none or a token id in [0, 1073741823]"));
  }
  return id;
}

bool IsFolder(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::Status CheckOutputFolder(const std::string& flag, const std::string& path) {
  const std::string dir = DirectoryOf(path);
  if (!IsFolder(dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", Quoted(path), ": the folder ", Quoted(dir), " does not exist (it is not created)"));
  }
  return absl::OkStatus();
}

// Encodes segments and writes their tokens in input order. With a tokenizer, segments
// are gathered into batches that its BatchEncoder encodes on the run's threads;
// byte-level segments are written as they come.
class Encoder {
 public:
  // `batches` nullptr: byte level.
  Encoder(BatchEncoder* batches, int threads, std::vector<int> bos, std::vector<int> eos, IndexedDatasetWriter* writer,
          TokenizeSummary* summary)
      : batches_(batches),
        threads_(threads),
        bos_(std::move(bos)),
        eos_(std::move(eos)),
        writer_(writer),
        summary_(summary) {}

  absl::Status Add(const std::string& path, Segment segment) {
    if (batches_ == nullptr) {
      ids_.assign(segment.text.begin(), segment.text.end());
      for (int& id : ids_) id &= 0xFF;  // char may be signed
      return Write(path, ids_, segment.ends_document);
    }
    batch_bytes_ += segment.text.size();
    batch_.push_back(PendingSegment{path, std::move(segment), {}, {}});
    if (batch_bytes_ >= kBatchBytesPerThread * static_cast<std::size_t>(threads_)) return Flush();
    return absl::OkStatus();
  }

  absl::Status Flush() {
    if (batch_.empty()) return absl::OkStatus();
    batches_->Encode(&batch_);
    for (PendingSegment& p : batch_) {
      if (!p.error.empty()) return absl::InternalError(InputError(p.path, p.error));
      TY_RETURN_IF_ERROR(Write(p.path, p.ids, p.segment.ends_document));
    }
    batch_.clear();
    batch_bytes_ = 0;
    return absl::OkStatus();
  }

 private:
  absl::Status Write(const std::string& path, const std::vector<int>& ids, bool ends_document) {
    if (!in_document_ && !bos_.empty()) TY_RETURN_IF_ERROR(writer_->Append(bos_.data(), bos_.size()));
    in_document_ = true;
    if (absl::Status s = writer_->Append(ids.data(), ids.size()); !s.ok()) {
      return absl::Status(s.code(), InputError(path, s.message()));
    }
    if (!ends_document) return absl::OkStatus();
    in_document_ = false;
    if (!eos_.empty()) TY_RETURN_IF_ERROR(writer_->Append(eos_.data(), eos_.size()));
    if (writer_->open_document_tokens() == 0) {
      ++summary_->skipped_documents;
      return absl::OkStatus();
    }
    return writer_->EndDocument();
  }

  BatchEncoder* batches_;
  int threads_;
  std::vector<int> bos_, eos_;
  IndexedDatasetWriter* writer_;
  TokenizeSummary* summary_;
  bool in_document_ = false;
  std::vector<PendingSegment> batch_;
  std::size_t batch_bytes_ = 0;
  std::vector<int> ids_;
};

}  // namespace

absl::Status ValidateOptions(const TokenizeOptions& o) {
  if (o.output_prefix.empty()) return absl::InvalidArgumentError("-o PREFIX is required");
  if (o.output_prefix.back() == '/' || absl::EndsWith(o.output_prefix, ".bin") ||
      absl::EndsWith(o.output_prefix, ".idx")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "-o ", Quoted(o.output_prefix), ": expected a prefix such as data/corpus (written: PREFIX.bin, PREFIX.idx)"));
  }
  TY_RETURN_IF_ERROR(CheckOutputFolder("-o", o.output_prefix));
  if (!o.model_path.empty() && o.train_vocab > 0) {
    return absl::InvalidArgumentError(
        "--model and --train-vocab exclude each other: encode with a model, or train one");
  }
  if (!o.tokenizer_path.empty() && (!o.model_path.empty() || o.train_vocab > 0)) {
    return absl::InvalidArgumentError(
        "--tokenizer excludes --model and --train-vocab: encode with a tokenizer.json or a SentencePiece model");
  }
  const bool training = o.train_vocab > 0;
  if (!training && (!o.model_out.empty() || o.model_type != "unigram")) {
    return absl::InvalidArgumentError("--model-out and --model-type apply only with --train-vocab");
  }
  if (training && (o.train_vocab < 300 || o.train_vocab > (1 << 20))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--train-vocab ", o.train_vocab,
                     ": expected 300..1048576 (256 byte pieces, </s>, <s>, <unk> and \\n come first)"));
  }
  if (o.model_type != "unigram" && o.model_type != "bpe") {
    return absl::InvalidArgumentError(absl::StrCat("--model-type ", Quoted(o.model_type), ": expected unigram or bpe"));
  }
  if (training)
    TY_RETURN_IF_ERROR(CheckOutputFolder("--model-out", o.model_out.empty() ? o.output_prefix : o.model_out));
  if (o.train_sentences < 1) return absl::InvalidArgumentError("--train-sentences must be at least 1");
  TY_RETURN_IF_ERROR(ParseEos(o.eos).status());
  if (o.dtype != "auto" && o.dtype != "uint16" && o.dtype != "int32") {
    return absl::InvalidArgumentError(absl::StrCat("--dtype ", Quoted(o.dtype), ": expected auto, uint16 or int32"));
  }
  if (o.invalid_utf8 != "error" && o.invalid_utf8 != "replace") {
    return absl::InvalidArgumentError(
        absl::StrCat("--invalid-utf8 ", Quoted(o.invalid_utf8), ": expected error or replace"));
  }
  if (o.model_path.empty() && !training && o.tokenizer_path.empty() && o.invalid_utf8 != "error") {
    return absl::InvalidArgumentError(
        "--invalid-utf8 applies to SentencePiece and --tokenizer only: byte level takes every byte");
  }
  if (o.threads < 0 || o.threads > 256) return absl::InvalidArgumentError("--threads: expected 0 (one per CPU) to 256");
  if (o.segment_bytes < 1024 || o.segment_bytes > (std::int64_t{1} << 30)) {
    return absl::InvalidArgumentError("--segment-kib: expected 1 to 1048576 (1 GiB)");
  }
  return absl::OkStatus();
}

absl::StatusOr<TokenizeSummary> RunTokenize(const TokenizeOptions& options, const TokenizeEnv& env) {
  TY_RETURN_IF_ERROR(ValidateOptions(options));
  TY_ASSIGN_OR_RETURN(const int eos_option, ParseEos(options.eos));
  TY_ASSIGN_OR_RETURN(InputListing listing, ListInputs(options.inputs, options.glob));
  TokenizeSummary summary;
  summary.files = static_cast<std::int64_t>(listing.files.size());
  summary.empty_files = listing.empty_files;
  summary.duplicate_files = listing.duplicates;
  if (listing.total_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("every input file is empty (", listing.files.size(), " files): there is nothing to tokenize"));
  }
  const int threads =
      options.threads > 0 ? options.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  ProgressDisplay progress(env.err, env.err_is_terminal, env.clock);

  std::string trained;
  std::unique_ptr<SpmModel> model;
  std::unique_ptr<HfTokenizer> hf;
  summary.tokenizer = "bytes";
  if (!options.model_path.empty() || options.train_vocab > 0) {
    TY_ASSIGN_OR_RETURN(model, PrepareSpmModel(options, listing, &progress, env, threads, &trained, &summary));
  } else if (!options.tokenizer_path.empty()) {
    TY_ASSIGN_OR_RETURN(hf, HfTokenizer::Load(options.tokenizer_path));
    summary.tokenizer = absl::StrCat("tokenizer.json ", options.tokenizer_path);
  }
  summary.threads = model == nullptr && hf == nullptr ? 1 : threads;

  // The vocabulary the dataset needs and the tokens around every document.
  if (hf != nullptr) {
    summary.vocab_size = hf->vocab_size();
    TY_RETURN_IF_ERROR(HfDocumentSpecials(*hf, eos_option, absl::StrCat("--tokenizer ", Quoted(options.tokenizer_path)),
                                          &summary.bos_ids, &summary.eos_ids));
  } else if (model != nullptr) {
    summary.vocab_size = model->vocab_size();
    summary.model_has_byte_fallback = model->has_byte_fallback();
    TY_ASSIGN_OR_RETURN(const int eos, SpmDocumentEos(*model, eos_option));
    if (eos >= 0) summary.eos_ids = {eos};
  } else {
    const int eos = eos_option >= 0 ? eos_option : -1;  // byte level: no EOS unless asked
    summary.vocab_size = std::max(256, eos + 1);
    if (eos >= 0) summary.eos_ids = {eos};
  }
  TokenDType dtype = summary.vocab_size <= 65536 ? TokenDType::kUInt16 : TokenDType::kInt32;
  if (options.dtype == "uint16" && dtype != TokenDType::kUInt16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype uint16: the vocabulary has ", summary.vocab_size, " ids, more than uint16's 65536"));
  }
  if (options.dtype == "int32") dtype = TokenDType::kInt32;
  summary.dtype = TokenDTypeName(dtype);

  std::vector<AtomicFileWriter> also;
  if (!trained.empty()) {
    const std::string model_out = options.model_out.empty() ? options.output_prefix + ".model" : options.model_out;
    AtomicFileWriter::Options unique;
    unique.unique_temp_name = true;
    TY_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::Create(model_out, unique));
    TY_RETURN_IF_ERROR(w.Append(trained));
    also.push_back(std::move(w));
  }
  TY_ASSIGN_OR_RETURN(std::unique_ptr<IndexedDatasetWriter> writer,
                      IndexedDatasetWriter::Create(options.output_prefix, dtype));

  // Byte level (no batches) takes every byte as it is.
  std::unique_ptr<BatchEncoder> batches;
  if (model != nullptr) batches = std::make_unique<SpmBatchEncoder>(model.get(), threads);
  if (hf != nullptr) batches = std::make_unique<HfBatchEncoder>(hf.get(), threads);
  const bool check_utf8 = batches != nullptr;
  const bool replace_utf8 = options.invalid_utf8 == "replace";
  SegmentOptions segment_options;
  segment_options.split_blank_lines = options.split_blank_lines;
  segment_options.max_segment_bytes = static_cast<std::size_t>(options.segment_bytes);
  Encoder encoder(batches.get(), threads, summary.bos_ids, summary.eos_ids, writer.get(), &summary);
  progress.Start("encode", listing.total_bytes);
  const absl::Time start = env.clock->Now();
  std::int64_t done = 0;
  for (const InputFile& file : listing.files) {
    absl::StatusOr<std::unique_ptr<SegmentReader>> reader = SegmentReader::Open(file.path, segment_options);
    if (!reader.ok()) return absl::Status(reader.status().code(), InputError(file.path, reader.status().message()));
    Segment segment;
    while (true) {
      absl::StatusOr<bool> got = (*reader)->Next(&segment);
      if (!got.ok()) return absl::Status(got.status().code(), InputError(file.path, got.status().message()));
      if (!*got) break;
      if (check_utf8) TY_RETURN_IF_ERROR(CheckUtf8(file.path, replace_utf8, &segment, &summary.replaced_utf8));
      TY_RETURN_IF_ERROR(encoder.Add(file.path, std::move(segment)));
      progress.Update(done + (*reader)->bytes_read());
    }
    done += (*reader)->bytes_read();
  }
  TY_RETURN_IF_ERROR(encoder.Flush());
  summary.bytes_in = done;
  summary.documents = writer->documents();
  summary.tokens = writer->tokens();
  if (summary.documents == 0) {
    return absl::InvalidArgumentError("no input document encodes to a token: the dataset would be empty");
  }
  TY_RETURN_IF_ERROR(writer->Commit(&also));
  summary.encode_seconds = absl::ToDoubleSeconds(env.clock->Now() - start);
  progress.Clear();
  summary.outputs = {writer->bin_path(), writer->idx_path()};
  for (const AtomicFileWriter& w : also) summary.outputs.push_back(w.path());
  return summary;
}

std::string FormatSummary(const TokenizeSummary& s) {
  const double rate = s.encode_seconds > 0 ? static_cast<double>(s.bytes_in) / s.encode_seconds / 1e6 : 0;
  std::string line = absl::StrFormat(
      "%d files (%d empty), %d documents, %d tokens, %s in, %.1f MB/s on %d thread%s (%.2f s); tokenizer %s; "
      "vocab %d (needs model.vocab_size >= %d), dtype %s, %seos %s",
      s.files, s.empty_files, s.documents, s.tokens, FormatBytes(s.bytes_in), rate, s.threads,
      s.threads == 1 ? "" : "s", s.encode_seconds, s.tokenizer, s.vocab_size, s.vocab_size, s.dtype,
      s.bos_ids.empty() ? "" : absl::StrCat("bos ", absl::StrJoin(s.bos_ids, " "), ", "),
      s.eos_ids.empty() ? "none" : absl::StrJoin(s.eos_ids, " "));
  if (s.duplicate_files > 0) absl::StrAppend(&line, "; ", s.duplicate_files, " repeated files skipped");
  if (s.skipped_documents > 0) absl::StrAppend(&line, "; ", s.skipped_documents, " documents without tokens skipped");
  if (s.replaced_utf8 > 0) absl::StrAppend(&line, "; ", s.replaced_utf8, " invalid UTF-8 bytes replaced by U+FFFD");
  if (!s.model_has_byte_fallback) absl::StrAppend(&line, "; the model has no byte fallback: unknown text became <unk>");
  absl::StrAppend(&line, "; wrote ", absl::StrJoin(s.outputs, ", "));
  return line;
}

}  // namespace trainyard::tokenize
