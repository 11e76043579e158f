// trainyard-tokenize: text files in, a Megatron-LM indexed dataset (PREFIX.bin +
// PREFIX.idx) out, for training.dataset = "tokens". Flags -> TokenizeOptions -> one
// RunTokenize (tokenize_job.h). Exit 0 done, 1 failed, 2 bad usage.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "client/tokenize/tokenize_job.h"
#include "common/base/clock.h"

int main(int argc, char** argv) {
  trainyard::tokenize::TokenizeOptions opt;
  CLI::App app{
      "trainyard-tokenize: turns text files into a Megatron-LM indexed dataset, PREFIX.bin + PREFIX.idx, for "
      "training.dataset = \"tokens\", dataset_path = \"PREFIX.idx\".\n"
      "Each input file is one document (with --split-blank-lines, each run of lines between empty lines). "
      "Tokens: byte values (vocabulary 256) by default; SentencePiece ids with --model, or with --train-vocab "
      "from a model trained on the inputs first; a Hugging Face byte-level BPE's ids (Llama-3, Qwen, DeepSeek, "
      "GPT-2 style) with --tokenizer tokenizer.json. The last line printed says "
      "the model.vocab_size the job "
      "needs. Outputs appear only when complete. See docs/tokenize.md."};
  app.add_option("-o,--output", opt.output_prefix,
                 "Output prefix: writes PREFIX.bin and PREFIX.idx (replacing older ones) in an existing folder")
      ->required();
  app.add_option("inputs", opt.inputs,
                 "Files and folders; folders are walked recursively, their files taken in bytewise path order")
      ->required();
  app.add_option("--glob", opt.glob,
                 "Inside folders, only files whose name matches this fnmatch(3) pattern, e.g. '*.py' (files named "
                 "on the command line are always taken)");
  app.add_flag("--split-blank-lines", opt.split_blank_lines,
               "An empty line ends a document (paragraphs as documents); the empty lines are dropped");
  app.add_option("--model", opt.model_path, "Encode with this SentencePiece model (.model file)");
  app.add_option("--tokenizer", opt.tokenizer_path,
                 "Encode with this Hugging Face tokenizer.json (byte-level BPE with its Split/ByteLevel regexes and "
                 "added tokens, which are recognized in the text); --eos auto puts the special tokens of its "
                 "TemplateProcessing around each document. NFC is the one normalizer; other models, normalizers and "
                 "pre-tokenizers are refused");
  app.add_option("--train-vocab", opt.train_vocab,
                 "Train a SentencePiece model with about N pieces (300..1048576) on the inputs, then encode with it. "
                 "The model is lossless: identity normalization, byte fallback, whitespace and newlines kept");
  app.add_option("--model-type", opt.model_type, "With --train-vocab: unigram or bpe")->capture_default_str();
  app.add_option("--model-out", opt.model_out, "With --train-vocab: where the model goes (default PREFIX.model)");
  app.add_option("--train-sentences", opt.train_sentences,
                 "With --train-vocab: train on a random sample of at most N sentences (lines grouped up to 4 KiB): "
                 "the bound on the trainer's memory")
      ->capture_default_str();
  app.add_option("--seed", opt.seed, "With --train-vocab: seed of the sample and the trainer")->capture_default_str();
  app.add_option("--eos", opt.eos,
                 "Token appended after every document: auto (the model's </s>; with --tokenizer the specials its "
                 "template puts before and after the text; none at byte level), none, or an id (byte level: the "
                 "vocabulary becomes max(256, ID+1); --tokenizer: after the text, its template's BOS kept)")
      ->capture_default_str();
  app.add_option("--dtype", opt.dtype,
                 "Token type in .bin: auto (uint16 when the vocabulary fits 65536, else int32), "
                 "uint16 or int32")
      ->capture_default_str();
  app.add_option("--invalid-utf8", opt.invalid_utf8,
                 "SentencePiece and --tokenizer: error (name the file and byte) or replace (encode U+FFFD for each "
                 "bad byte)")
      ->capture_default_str();
  app.add_option("--threads", opt.threads, "Encoding threads (0: one per CPU)")->capture_default_str();
  std::int64_t segment_kib = opt.segment_bytes / 1024;
  app.add_option("--segment-kib", segment_kib,
                 "Documents are encoded in pieces of at most this many KiB, cut after a newline (a longer line at "
                 "a character boundary); bounds memory")
      ->capture_default_str();
  app.footer(
      "Examples:\n"
      "  trainyard-tokenize -o /data/corpus /data/text --glob '*.txt' --train-vocab 2000\n"
      "      train a 2000-piece SentencePiece model on the .txt files under /data/text, then write\n"
      "      /data/corpus.bin, /data/corpus.idx and /data/corpus.model; the last line says the\n"
      "      model.vocab_size the job needs\n"
      "  trainyard-tokenize -o /data/code src/ --tokenizer Llama-3.2-1B/tokenizer.json\n"
      "      the ids a Hugging Face tokenizer gives (tokenizers' encode with its special tokens)\n"
      "  trainyard-tokenize -o /data/notes notes.md --split-blank-lines\n"
      "      byte-level tokens (vocabulary 256), one document per paragraph\n"
      "Then, with N the vocabulary size that last line gave:\n"
      "  trainyard submit job.toml --set training.dataset=tokens --set training.dataset_path=/data/corpus.idx "
      "--set model.vocab_size=N\n"
      "Exit status: 0 done, 1 failed, 2 bad usage.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  opt.segment_bytes = segment_kib * 1024;
  if (absl::Status s = trainyard::tokenize::ValidateOptions(opt); !s.ok()) {
    std::fprintf(stderr, "trainyard-tokenize: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  trainyard::tokenize::TokenizeEnv env;
  env.err = stderr;
  const char* term = std::getenv("TERM");
  env.err_is_terminal = isatty(STDERR_FILENO) == 1 && (term == nullptr || std::strcmp(term, "dumb") != 0);
  env.clock = trainyard::SystemClock();
  absl::StatusOr<trainyard::tokenize::TokenizeSummary> summary = trainyard::tokenize::RunTokenize(opt, env);
  if (!summary.ok()) {
    std::fprintf(stderr, "trainyard-tokenize: %s\n", std::string(summary.status().message()).c_str());
    return 1;
  }
  std::printf("trainyard-tokenize: %s\n", trainyard::tokenize::FormatSummary(*summary).c_str());
  return 0;
}
