#include "client/tokenize/tokenize_job.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
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
#include "client/tokenize/hf_tokenizer.h"
#include "client/tokenize/indexed_dataset_writer.h"
#include "client/tokenize/input_files.h"
#include "client/tokenize/progress.h"
#include "client/tokenize/segment_reader.h"
#include "client/tokenize/spm_model.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/text.h"

namespace trainyard::tokenize {
namespace {

constexpr std::size_t kModelFileCap = std::size_t{1} << 30;
// Training sentences: whole lines grouped up to this size (a longer line is cut).
constexpr std::size_t kTrainSentenceBytes = 4096;
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

std::string InputError(const std::string& path, absl::string_view what) {
  return absl::StrCat("input ", Quoted(path), ": ", what);
}

// Applies the UTF-8 policy to a segment: OK as it is, replaced (counting the bytes),
// or an error naming the file and byte.
absl::Status CheckUtf8(const std::string& path, bool replace, Segment* segment, std::int64_t* replaced) {
  std::size_t bad = FirstInvalidUtf8(segment->text);
  if (bad == std::string_view::npos) return absl::OkStatus();
  if (!replace) {
    return absl::InvalidArgumentError(
        InputError(path, absl::StrCat("invalid UTF-8 at byte ", segment->file_offset + static_cast<std::int64_t>(bad),
                                      " (the tokenizer encodes text; --invalid-utf8 replace encodes U+FFFD instead)")));
  }
  const std::string fixed = ToValidUtf8(segment->text);
  // Each invalid byte became the 3 bytes of U+FFFD.
  *replaced += static_cast<std::int64_t>(fixed.size() - segment->text.size()) / 2;
  segment->text = fixed;
  return absl::OkStatus();
}

// The training sentences: every input's lines, grouped into kTrainSentenceBytes.
class FileSentenceSource : public SentenceSource {
 public:
  FileSentenceSource(const InputListing& listing, bool replace_utf8, ProgressDisplay* progress)
      : listing_(listing), replace_utf8_(replace_utf8), progress_(progress) {}

  bool Next(std::string* sentence) override {
    while (error_.empty()) {
      if (reader_ == nullptr) {
        if (file_ == listing_.files.size()) return false;
        SegmentOptions options;
        options.max_segment_bytes = kTrainSentenceBytes;
        absl::StatusOr<std::unique_ptr<SegmentReader>> r = SegmentReader::Open(listing_.files[file_].path, options);
        if (!r.ok()) return Fail(r.status().message());
        reader_ = std::move(*r);
      }
      Segment segment;
      absl::StatusOr<bool> got = reader_->Next(&segment);
      if (!got.ok()) return Fail(got.status().message());
      progress_->Update(done_ + reader_->bytes_read());
      if (!*got) {
        done_ += reader_->bytes_read();
        reader_.reset();
        ++file_;
        continue;
      }
      std::int64_t replaced = 0;
      if (absl::Status s = CheckUtf8(listing_.files[file_].path, replace_utf8_, &segment, &replaced); !s.ok()) {
        error_ = std::string(s.message());
        return false;
      }
      ++sentences_;
      *sentence = std::move(segment.text);
      return true;
    }
    return false;
  }
  std::string error() const override { return error_; }
  std::int64_t sentences() const { return sentences_; }

 private:
  bool Fail(absl::string_view why) {
    error_ = InputError(listing_.files[file_].path, why);
    return false;
  }

  const InputListing& listing_;
  bool replace_utf8_;
  ProgressDisplay* progress_;
  std::size_t file_ = 0;
  std::unique_ptr<SegmentReader> reader_;
  std::int64_t done_ = 0;
  std::int64_t sentences_ = 0;
  std::string error_;
};

// Encodes segments and writes their tokens in input order. SentencePiece and
// tokenizer.json segments are gathered into batches that `threads` threads encode at
// once; byte-level segments are written as they come. SentencePiece encodes each segment
// on its own (each thread takes the next from a shared counter). A tokenizer.json
// document's segments are encoded in order by one thread, each segment after what the
// previous one left undecided (HfEncoder::Encode), so the ids are those of the whole
// document; threads take whole documents, and what the batch's last, unfinished
// document left waits in carry_ for the next batch.
class Encoder {
 public:
  Encoder(const SpmModel* model, const HfTokenizer* hf, int threads, std::vector<int> bos, std::vector<int> eos,
          IndexedDatasetWriter* writer, TokenizeSummary* summary)
      : model_(model),
        hf_(hf),
        threads_(threads),
        bos_(std::move(bos)),
        eos_(std::move(eos)),
        writer_(writer),
        summary_(summary) {
    if (hf_ != nullptr) {
      for (int t = 0; t < threads_; ++t) hf_encoders_.push_back(std::make_unique<HfEncoder>(hf_));
    }
  }

  absl::Status Add(const std::string& path, Segment segment) {
    if (model_ == nullptr && hf_ == nullptr) {
      ids_.assign(segment.text.begin(), segment.text.end());
      for (int& id : ids_) id &= 0xFF;  // char may be signed
      return Write(path, ids_, segment.ends_document);
    }
    batch_bytes_ += segment.text.size();
    batch_.push_back(Pending{path, std::move(segment), {}, {}});
    if (batch_bytes_ >= kBatchBytesPerThread * static_cast<std::size_t>(threads_)) return Flush();
    return absl::OkStatus();
  }

  absl::Status Flush() {
    if (batch_.empty()) return absl::OkStatus();
    if (hf_ != nullptr) {
      EncodeHf();
    } else {
      std::atomic<std::size_t> next{0};
      RunThreads([&](int) {
        for (std::size_t i = next++; i < batch_.size(); i = next++) {
          Pending& p = batch_[i];
          model_->Encode(p.segment.text, &p.ids, &p.error);
        }
      });
    }
    for (Pending& p : batch_) {
      if (!p.error.empty()) {
        return absl::InternalError(InputError(
            p.path, absl::StrCat(hf_ != nullptr ? "" : "SentencePiece ", "cannot encode the segment at byte ",
                                 p.segment.file_offset, ": ", p.error)));
      }
      TY_RETURN_IF_ERROR(Write(p.path, p.ids, p.segment.ends_document));
    }
    batch_.clear();
    batch_bytes_ = 0;
    return absl::OkStatus();
  }

 private:
  struct Pending {
    std::string path;
    Segment segment;
    std::vector<int> ids;
    std::string error;
  };

  template <typename Work>
  void RunThreads(const Work& work) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads_; ++t) pool.emplace_back(work, t);
    work(0);
    for (std::thread& t : pool) t.join();
  }

  void EncodeHf() {
    // Runs: the batch's segments of one document each; only the last may be unfinished.
    std::vector<std::size_t> starts = {0};
    for (std::size_t i = 0; i + 1 < batch_.size(); ++i) {
      if (batch_[i].segment.ends_document) starts.push_back(i + 1);
    }
    starts.push_back(batch_.size());
    std::string left_over;
    std::atomic<std::size_t> next{0};
    RunThreads([&](int thread) {
      HfEncoder& encoder = *hf_encoders_[thread];
      for (std::size_t run = next++; run + 1 < starts.size(); run = next++) {
        std::string text = run == 0 ? std::move(carry_) : std::string();
        for (std::size_t i = starts[run]; i < starts[run + 1]; ++i) {
          Pending& p = batch_[i];
          text += p.segment.text;
          absl::StatusOr<std::size_t> done = encoder.Encode(text, p.segment.ends_document, &p.ids);
          if (!done.ok()) {
            p.error = std::string(done.status().message());
            break;
          }
          text.erase(0, *done);
        }
        if (run + 2 == starts.size() && !batch_.back().segment.ends_document) left_over = std::move(text);
      }
    });
    carry_ = std::move(left_over);
  }

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

  const SpmModel* model_;
  const HfTokenizer* hf_;
  int threads_;
  std::vector<int> bos_, eos_;
  IndexedDatasetWriter* writer_;
  TokenizeSummary* summary_;
  std::vector<std::unique_ptr<HfEncoder>> hf_encoders_;  // one per thread
  std::string carry_;                                    // undecided text of the document the last batch left open
  bool in_document_ = false;
  std::vector<Pending> batch_;
  std::size_t batch_bytes_ = 0;
  std::vector<int> ids_;
};

// The model of the run: loaded, trained (its bytes in *trained), or none (byte level).
absl::StatusOr<std::unique_ptr<SpmModel>> PrepareModel(const TokenizeOptions& options, const InputListing& listing,
                                                       ProgressDisplay* progress, const TokenizeEnv& env, int threads,
                                                       std::string* trained, TokenizeSummary* summary) {
  std::string serialized;
  std::string what;
  if (!options.model_path.empty()) {
    absl::StatusOr<std::string> bytes = ReadFile(options.model_path, kModelFileCap);
    if (!bytes.ok())
      return absl::Status(bytes.status().code(),
                          absl::StrCat("--model ", Quoted(options.model_path), ": ", bytes.status().message()));
    serialized = std::move(*bytes);
    what = absl::StrCat("--model ", Quoted(options.model_path));
    summary->tokenizer = absl::StrCat("sentencepiece ", options.model_path);
  } else if (options.train_vocab > 0) {
    progress->Start("sample", listing.total_bytes);
    FileSentenceSource source(listing, options.invalid_utf8 == "replace", progress);
    SpmTrainOptions train;
    train.vocab_size = options.train_vocab;
    train.model_type = options.model_type;
    train.max_sentences = options.train_sentences;
    train.max_sentence_bytes = static_cast<int>(kTrainSentenceBytes * 3);  // room for U+FFFD replacements
    train.seed = options.seed;
    train.threads = threads;
    const absl::Time start = env.clock->Now();
    std::string error;
    const bool ok = TrainSpm(train, &source, &serialized, &error);
    progress->Clear();
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("--train-vocab ", options.train_vocab, ": ", error));
    summary->train_seconds = absl::ToDoubleSeconds(env.clock->Now() - start);
    *trained = serialized;
    what = "the trained model";
    summary->tokenizer =
        absl::StrFormat("sentencepiece %s trained (%d pieces asked, %d sentences, %.1f s)", options.model_type,
                        options.train_vocab, source.sentences(), summary->train_seconds);
  } else {
    summary->tokenizer = "bytes";
    return std::unique_ptr<SpmModel>();
  }
  std::string error;
  std::unique_ptr<SpmModel> model = SpmModel::FromSerialized(serialized, &error);
  if (model == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a usable SentencePiece model: ", error));
  }
  return model;
}

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
  TY_ASSIGN_OR_RETURN(std::unique_ptr<SpmModel> model,
                      PrepareModel(options, listing, &progress, env, threads, &trained, &summary));
  std::unique_ptr<HfTokenizer> hf;
  if (!options.tokenizer_path.empty()) {
    TY_ASSIGN_OR_RETURN(hf, HfTokenizer::Load(options.tokenizer_path));
    summary.tokenizer = absl::StrCat("tokenizer.json ", options.tokenizer_path);
  }
  summary.threads = model == nullptr && hf == nullptr ? 1 : threads;

  // The vocabulary the dataset needs and the tokens around every document.
  int eos = -1;
  std::vector<int> bos;
  if (hf != nullptr) {
    summary.vocab_size = hf->vocab_size();
    const std::string name = absl::StrCat("--tokenizer ", Quoted(options.tokenizer_path));
    if (eos_option == -2) {
      if (hf->bos_ids().empty() && hf->eos_ids().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name,
                         ": its post_processor puts no special token around a text (no TemplateProcessing with one): "
                         "pass --eos none (documents run together) or --eos ID"));
      }
      bos = hf->bos_ids();
      summary.eos_ids = hf->eos_ids();
    } else if (eos_option >= hf->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("--eos ", eos_option, ": the tokenizer has ", hf->vocab_size(),
                                                     " ids (0..", hf->vocab_size() - 1, ")"));
    } else if (eos_option >= 0) {
      bos = hf->bos_ids();
      summary.eos_ids = {eos_option};
    }
  } else if (model != nullptr) {
    summary.vocab_size = model->vocab_size();
    summary.model_has_byte_fallback = model->has_byte_fallback();
    if (eos_option == -2) {
      eos = model->eos_id();
      if (eos < 0) {
        return absl::InvalidArgumentError(
            "the model defines no end-of-sequence piece: pass --eos none (documents run together) or --eos ID");
      }
    } else if (eos_option >= model->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("--eos ", eos_option, ": the model has ", model->vocab_size(),
                                                     " pieces (ids 0..", model->vocab_size() - 1, ")"));
    } else {
      eos = eos_option;
    }
  } else {
    eos = eos_option >= 0 ? eos_option : -1;  // byte level: no EOS unless asked
    summary.vocab_size = std::max(256, eos + 1);
  }
  if (hf == nullptr && eos >= 0) summary.eos_ids = {eos};
  summary.bos_ids = bos;
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

  const bool check_utf8 = model != nullptr || hf != nullptr;
  const bool replace_utf8 = options.invalid_utf8 == "replace";
  SegmentOptions segment_options;
  segment_options.split_blank_lines = options.split_blank_lines;
  segment_options.max_segment_bytes = static_cast<std::size_t>(options.segment_bytes);
  Encoder encoder(model.get(), hf.get(), threads, summary.bos_ids, summary.eos_ids, writer.get(), &summary);
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
