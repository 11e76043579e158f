#include "client/tokenize/spm_job.h"

#include <atomic>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/tokenize/input_text.h"
#include "client/tokenize/segment_reader.h"
#include "common/base/file_io.h"
#include "common/base/text.h"

namespace trainyard::tokenize {
namespace {

constexpr std::size_t kModelFileCap = std::size_t{1} << 30;
// Training sentences: whole lines grouped up to this size (a longer line is cut).
constexpr std::size_t kTrainSentenceBytes = 4096;

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

}  // namespace

absl::StatusOr<std::unique_ptr<SpmModel>> PrepareSpmModel(const TokenizeOptions& options, const InputListing& listing,
                                                          ProgressDisplay* progress, const TokenizeEnv& env,
                                                          int threads, std::string* trained, TokenizeSummary* summary) {
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
  } else {
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
  }
  std::string error;
  std::unique_ptr<SpmModel> model = SpmModel::FromSerialized(serialized, &error);
  if (model == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a usable SentencePiece model: ", error));
  }
  return model;
}

absl::StatusOr<int> SpmDocumentEos(const SpmModel& model, int eos_option) {
  if (eos_option == -2) {
    if (model.eos_id() < 0) {
      return absl::InvalidArgumentError(
          "the model defines no end-of-sequence piece: pass --eos none (documents run together) or --eos ID");
    }
    return model.eos_id();
  }
  if (eos_option >= model.vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat("--eos ", eos_option, ": the model has ", model.vocab_size(),
                                                   " pieces (ids 0..", model.vocab_size() - 1, ")"));
  }
  return eos_option;
}

void SpmBatchEncoder::Encode(std::vector<PendingSegment>* batch) {
  std::atomic<std::size_t> next{0};
  RunOnThreads(threads_, [&](int) {
    for (std::size_t i = next++; i < batch->size(); i = next++) {
      PendingSegment& p = (*batch)[i];
      model_->Encode(p.segment.text, &p.ids, &p.error);
      if (!p.error.empty()) {
        p.error =
            absl::StrCat("SentencePiece cannot encode the segment at byte ", p.segment.file_offset, ": ", p.error);
      }
    }
  });
}

}  // namespace trainyard::tokenize
