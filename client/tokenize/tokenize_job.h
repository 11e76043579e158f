// One trainyard-tokenize run: the inputs listed (input_files.h), a SentencePiece model
// loaded or trained (spm_job.h), a Hugging Face tokenizer.json (hf_job.h) or none (byte
// level), every document encoded in line-aligned segments (segment_reader.h) on
// `threads` threads, and the tokens written as a Megatron indexed dataset
// (indexed_dataset_writer.h). docs/tokenize.md is the user's description; the
// decisions it documents live here and in those two files:
//
//   - byte level: token = byte value, vocabulary 256, no EOS unless --eos ID (then the
//     vocabulary is max(256, ID + 1));
//   - SentencePiece: the model's eos_id after every document unless --eos none or
//     --eos ID; a model without one needs one of the two;
//   - tokenizer.json: the specials its TemplateProcessing puts before and after $A
//     around every document (--eos auto); --eos none puts none, --eos ID keeps the
//     ones before and puts ID after; a file whose template adds none needs one of the
//     two. Added tokens in the text are recognized, as the library does;
//   - dtype uint16 when the vocabulary is at most 65536, else int32;
//   - invalid UTF-8 is an error naming the file and byte under SentencePiece (whose
//     normalizer would turn it into U+FFFD silently) and tokenizer.json (the library
//     takes only text), or replaced by U+FFFD with --invalid-utf8 replace; byte level
//     takes every byte as it is;
//   - a document that encodes to no token (and has no EOS) is skipped and counted.
//
// Thread contract: RunTokenize is called by one thread at a time (SentencePiece's
// trainer is global); it starts and joins its own encoding threads.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/clock.h"

namespace trainyard::tokenize {

struct TokenizeOptions {
  std::string output_prefix;        // -o: PREFIX.bin, PREFIX.idx
  std::vector<std::string> inputs;  // files and folders
  std::string glob;                 // name filter inside folders
  std::string model_path;           // --model: encode with this SentencePiece model
  std::string tokenizer_path;       // --tokenizer: encode with this tokenizer.json
  int train_vocab = 0;              // --train-vocab: train a model of this size first
  std::string model_type = "unigram";
  std::string model_out;  // where the trained model goes; "" = PREFIX.model
  std::int64_t train_sentences = 300000;
  unsigned int seed = 0;
  std::string eos = "auto";    // auto | none | ID
  std::string dtype = "auto";  // auto | uint16 | int32
  bool split_blank_lines = false;
  std::string invalid_utf8 = "error";  // error | replace
  int threads = 0;                     // 0 = one per CPU
  std::int64_t segment_bytes = 1 << 20;
};

// Where a run prints and what it measures time with.
struct TokenizeEnv {
  std::FILE* err = stderr;
  bool err_is_terminal = false;  // draws the progress line
  Clock* clock = nullptr;
};

struct TokenizeSummary {
  std::int64_t files = 0, empty_files = 0, duplicate_files = 0;
  std::int64_t documents = 0, skipped_documents = 0;
  std::int64_t tokens = 0;
  std::int64_t bytes_in = 0;
  std::int64_t replaced_utf8 = 0;  // invalid bytes replaced by U+FFFD
  double encode_seconds = 0, train_seconds = 0;
  std::string tokenizer;  // "bytes", "sentencepiece MODEL", "sentencepiece trained ...", "tokenizer.json PATH"
  int vocab_size = 0;     // the smallest model.vocab_size that fits every token
  std::vector<int> bos_ids, eos_ids;  // before and after every document
  int threads = 1;
  std::string dtype;
  std::vector<std::string> outputs;  // .bin, .idx (and the trained model)
  bool model_has_byte_fallback = true;
};

// Checks the options alone (modes, values, the output folder): INVALID_ARGUMENT with
// the flag and value in the message.
absl::Status ValidateOptions(const TokenizeOptions& options);

// Runs the options (validated first). Errors name the input file and the byte offset
// where there is one; nothing is left under the output names on failure.
absl::StatusOr<TokenizeSummary> RunTokenize(const TokenizeOptions& options, const TokenizeEnv& env);

// The summary as one line (no newline).
std::string FormatSummary(const TokenizeSummary& summary);

}  // namespace trainyard::tokenize
