// SentencePiece behind spm_model.h. This file must include no Abseil header (see the
// header for why).
#include "client/tokenize/spm_model.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <string>
#include <unordered_map>
#include <utility>

namespace trainyard::tokenize {

struct SpmModel::Impl {
  sentencepiece::SentencePieceProcessor processor;
  bool byte_fallback = false;
};

SpmModel::SpmModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SpmModel::~SpmModel() = default;

std::unique_ptr<SpmModel> SpmModel::FromSerialized(const std::string& serialized, std::string* error) {
  auto impl = std::make_unique<Impl>();
  if (const sentencepiece::util::Status s = impl->processor.LoadFromSerializedProto(serialized); !s.ok()) {
    *error = s.ToString();
    return nullptr;
  }
  if (impl->processor.GetPieceSize() <= 0) {
    *error = "the model has no pieces";
    return nullptr;
  }
  int bytes = 0;
  for (int id = 0; id < impl->processor.GetPieceSize(); ++id) bytes += impl->processor.IsByte(id) ? 1 : 0;
  impl->byte_fallback = bytes == 256;
  return std::unique_ptr<SpmModel>(new SpmModel(std::move(impl)));
}

int SpmModel::vocab_size() const { return impl_->processor.GetPieceSize(); }
int SpmModel::eos_id() const { return impl_->processor.eos_id(); }
bool SpmModel::has_byte_fallback() const { return impl_->byte_fallback; }

bool SpmModel::Encode(std::string_view text, std::vector<int>* ids, std::string* error) const {
  std::vector<int> out;
  if (const sentencepiece::util::Status s = impl_->processor.Encode(text, &out); !s.ok()) {
    *error = s.ToString();
    return false;
  }
  ids->insert(ids->end(), out.begin(), out.end());
  return true;
}

bool SpmModel::Decode(const std::vector<int>& ids, std::string* text, std::string* error) const {
  if (const sentencepiece::util::Status s = impl_->processor.Decode(ids, text); !s.ok()) {
    *error = s.ToString();
    return false;
  }
  return true;
}

namespace {

// SentencePiece's pull interface over a SentenceSource.
class SourceIterator : public sentencepiece::SentenceIterator {
 public:
  explicit SourceIterator(SentenceSource* source) : source_(source) { Next(); }
  bool done() const override { return done_; }
  void Next() override { done_ = !source_->Next(&value_); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override {
    const std::string error = source_->error();
    if (error.empty()) return sentencepiece::util::Status();
    return sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal, error);
  }

 private:
  SentenceSource* source_;
  std::string value_;
  bool done_ = false;
};

}  // namespace

bool TrainSpm(const SpmTrainOptions& options, SentenceSource* source, std::string* serialized_model,
              std::string* error) {
  // The sample and the trainer's own shuffles draw from this generator, so the same
  // inputs and seed give the same model.
  sentencepiece::SetRandomGeneratorSeed(options.seed);
  const std::unordered_map<std::string, std::string> args = {
      {"vocab_size", std::to_string(options.vocab_size)},
      {"model_type", options.model_type},
      {"input_sentence_size", std::to_string(options.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", std::to_string(options.max_sentence_bytes)},
      {"num_threads", std::to_string(options.threads)},
      // Lossless: the bytes in are the bytes decoded.
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"byte_fallback", "true"},
      // Rare characters are left to byte fallback rather than each taking a piece.
      {"character_coverage", "0.9995"},
      // A newline is a piece of its own, so no piece spans a line end and encoding a
      // document in line-aligned segments (tokenize_job.cc) matches encoding it whole
      // up to ties between equal-score splits.
      {"user_defined_symbols", "\n"},
      {"allow_whitespace_only_pieces", "true"},
      {"split_digits", "true"},
      // vocab_size is a target: a small corpus may not hold that many pieces.
      {"hard_vocab_limit", "false"},
      // Errors only; the trainer's progress log would bury the tool's own output.
      {"minloglevel", "2"},
  };
  SourceIterator iterator(source);
  const sentencepiece::util::Status s =
      sentencepiece::SentencePieceTrainer::Train(args, &iterator, serialized_model);
  if (const std::string source_error = source->error(); !source_error.empty()) {
    *error = source_error;
    return false;
  }
  if (!s.ok()) {
    *error = s.ToString();
    return false;
  }
  return true;
}

}  // namespace trainyard::tokenize
