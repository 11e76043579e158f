// SentencePiece behind a plain C++ interface: loading a model, encoding and decoding,
// and training a model from sentences a caller supplies.
//
// Why a wrapper: sentencepiece_processor.h declares `namespace absl { using
// std::string_view; }`, which collides with Abseil's own absl::string_view (Debian's
// Abseil does not alias std::string_view), so no translation unit may include both.
// This header and spm_model.cc include no Abseil header; errors come back as text that
// the callers turn into absl::Status.
//
// Thread contract: a loaded SpmModel is immutable; Encode and Decode may be called from
// several threads at once (SentencePieceProcessor's encode/decode are const). TrainSpm
// is not reentrant: SentencePiece's training options and random seed are global.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trainyard::tokenize {

class SpmModel {
 public:
  // A model from the bytes of a .model file (a serialized ModelProto). nullptr with
  // SentencePiece's reason in *error when the bytes are not a usable model.
  static std::unique_ptr<SpmModel> FromSerialized(const std::string& serialized, std::string* error);
  ~SpmModel();
  SpmModel(const SpmModel&) = delete;
  SpmModel& operator=(const SpmModel&) = delete;

  // Number of pieces; every id Encode returns is below it.
  int vocab_size() const;
  // The end-of-sequence id, or -1 when the model defines none.
  int eos_id() const;
  // Whether the model has byte pieces (<0x00>..<0xFF>), so no byte is ever unknown.
  bool has_byte_fallback() const;

  // Appends the ids of `text` to *ids; false and the reason in *error on failure.
  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  // The text of `ids`; false and the reason in *error on failure.
  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const;

 private:
  struct Impl;
  explicit SpmModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Where TrainSpm takes its sentences from, pulled one at a time.
class SentenceSource {
 public:
  virtual ~SentenceSource() = default;
  // The next sentence into *sentence; false at the end or on an error (then error() is
  // non-empty and training fails with it).
  virtual bool Next(std::string* sentence) = 0;
  virtual std::string error() const = 0;
};

struct SpmTrainOptions {
  int vocab_size = 0;
  std::string model_type = "unigram";  // "unigram" | "bpe"
  // SentencePiece keeps a uniform random sample of at most this many sentences
  // (input_sentence_size with shuffle_input_sentence): the bound on training memory.
  std::int64_t max_sentences = 0;
  // The longest sentence SentencePiece accepts (max_sentence_length); the source must
  // not give longer ones, which SentencePiece would drop.
  int max_sentence_bytes = 0;
  unsigned int seed = 0;  // of the sample and of the trainer's randomness
  int threads = 1;
};

// Trains a model on `source` and returns its serialized bytes in *serialized_model.
// The model is lossless for text: identity normalization (no NFKC, whitespace kept as
// it is), no dummy prefix, byte fallback (every byte encodable), "\n" a piece of its
// own, whitespace-only pieces allowed (code indentation), digits split. eos_id 2
// (</s>), bos 1, unk 0. false and the reason in *error on failure.
bool TrainSpm(const SpmTrainOptions& options, SentenceSource* source, std::string* serialized_model,
              std::string* error);

}  // namespace trainyard::tokenize
