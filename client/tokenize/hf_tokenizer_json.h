// Reading a Hugging Face tokenizer.json into the plain description HfTokenizer
// (hf_tokenizer.h) encodes with. Only what that encoder reproduces exactly is taken:
//
//   - model: BPE over byte-level symbols (vocab keys in ByteLevel's byte-to-character
//     alphabet), merges as "a b" strings or ["a", "b"] pairs, ignore_merges; no
//     dropout, unk fusing, byte_fallback, continuing_subword_prefix or
//     end_of_word_suffix;
//   - normalizer: none (null or an empty Sequence) or NFC (alone or the one member of a
//     Sequence), Qwen's;
//   - pre_tokenizer: ByteLevel (add_prefix_space false), alone or last in a Sequence
//     after Split steps (pattern Regex or String, behavior Isolated, invert false);
//   - added tokens without single_word, lstrip or rstrip;
//   - post_processor: none, ByteLevel (offsets only), TemplateProcessing (the special
//     tokens around $A of `single` become the BOS and EOS ids), or a Sequence of those;
//   - no truncation or padding.
//
// Anything else is refused with the file, the JSON path and the value: a file the
// encoder would misread must not produce a dataset.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace trainyard::tokenize {

struct HfAddedToken {
  std::string content;
  int id = 0;
  // Matched in the second pass, on what the first pass (normalized = false tokens)
  // left: the library's order.
  bool normalized = false;
};

struct HfMerge {
  int left = 0, right = 0, result = 0;  // ids
};

struct HfTokenizerSpec {
  // Vocabulary entries by their bytes (the key's characters mapped back through
  // ByteLevel's alphabet); keys outside that alphabet cannot come out of the BPE and
  // are left out here (they still count for the vocabulary size).
  absl::flat_hash_map<std::string, int> vocab;
  int byte_ids[256] = {};       // the single-byte symbol of each byte
  std::vector<HfMerge> merges;  // rank = index
  bool ignore_merges = false;   // a pre-token found whole in the vocabulary is one id
  std::vector<HfAddedToken> added_tokens;
  // Split steps of the pre-tokenizer, in order, as PCRE2 patterns (String patterns
  // escaped), then ByteLevel's own regex when its use_regex is true.
  std::vector<std::string> split_patterns;
  std::vector<std::string> split_paths;  // the JSON path of each, for errors
  std::vector<int> bos_ids, eos_ids;     // around each document: the template's specials
  bool has_template = false;
  bool nfc = false;    // the normalizer is NFC
  int vocab_size = 0;  // largest id + 1
};

// Parses `json` (the bytes of a tokenizer.json); errors read "<name>: <json path>:
// <what>", e.g. "--tokenizer 't.json': model.type \"WordPiece\": only BPE is
// supported".
absl::StatusOr<HfTokenizerSpec> ParseHfTokenizerJson(std::string_view json, const std::string& name);

// The byte ByteLevel writes as `code_point`, or -1 when it is outside its alphabet.
int ByteLevelByte(std::uint32_t code_point);

// GPT-2's pre-tokenizer regex, which ByteLevel uses with use_regex.
extern const char kByteLevelPattern[];

}  // namespace trainyard::tokenize
