// Encoding text with a Hugging Face tokenizer.json (byte-level BPE; what is accepted is
// listed in hf_tokenizer_json.h), giving the ids the `tokenizers` library gives for the
// same text, without the post-processor's specials (bos_ids/eos_ids, which the caller
// puts around each document).
//
// The library's steps, in its order: added tokens are cut out of the text (tokens with
// normalized = false first, then the text between them is normalized (NFC, by ICU, when
// the file says so), then the other tokens are cut out of that; each pass
// leftmost-longest); every other stretch is split by each Split regex in turn, then by ByteLevel's own
// regex when it has use_regex (each match a piece, and the text between matches too);
// each piece's bytes are merged by rank (lowest first, leftmost among equals) into
// vocabulary ids, or taken whole when ignore_merges is set and the vocabulary holds
// the piece.
//
// Regexes: PCRE2 with UTF and UCP (\s, \w, \d, \p{..} by Unicode properties), where
// the library uses Oniguruma. The patterns of Llama-3, Qwen, DeepSeek and GPT-2 mean the
// same in both, up to the Unicode tables' versions (PCRE2 10.42: Unicode 14). Patterns
// whose meaning differs are refused: \h and \H (hexadecimal digits in Oniguruma), ^ and
// $ (line anchors there), and anything that looks behind or can match the empty string
// (see Encode).
//
// Thread contract: an HfTokenizer is immutable once loaded and may be shared; each
// thread encodes with its own HfEncoder.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "client/tokenize/hf_tokenizer_json.h"

struct pcre2_real_code_8;

namespace trainyard::tokenize {

class HfTokenizer {
 public:
  // The file at `path` (at most 256 MiB); errors start with "--tokenizer 'PATH': ".
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Load(const std::string& path);
  // The same from the file's bytes; `name` starts the errors.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromJson(std::string_view json, const std::string& name);
  ~HfTokenizer();
  HfTokenizer(const HfTokenizer&) = delete;
  HfTokenizer& operator=(const HfTokenizer&) = delete;

  int vocab_size() const { return spec_.vocab_size; }
  // The post-processor's specials before and after $A (empty without a template).
  const std::vector<int>& bos_ids() const { return spec_.bos_ids; }
  const std::vector<int>& eos_ids() const { return spec_.eos_ids; }
  bool has_template() const { return spec_.has_template; }

 private:
  friend class HfEncoder;
  HfTokenizer() = default;

  // Added tokens of one pass, by first byte, longest first.
  struct AddedPass {
    std::vector<std::vector<const HfAddedToken*>> by_first_byte = std::vector<std::vector<const HfAddedToken*>>(256);
    std::size_t longest = 0;
  };

  HfTokenizerSpec spec_;
  AddedPass passes_[2];  // normalized = false, then true
  std::vector<pcre2_real_code_8*> regexes_;
  // (left id, right id) -> (rank, merged id)
  absl::flat_hash_map<std::uint64_t, std::pair<int, int>> merges_;
  const void* nfc_ = nullptr;  // ICU's NFC normalizer (icu::Normalizer2) when the file has one
};

// One thread's encoder: match buffers and a cache of pieces already merged.
class HfEncoder {
 public:
  explicit HfEncoder(const HfTokenizer* tokenizer);
  ~HfEncoder();
  HfEncoder(const HfEncoder&) = delete;
  HfEncoder& operator=(const HfEncoder&) = delete;

  // Appends the ids of `text` (valid UTF-8) to *ids and returns how many of its bytes
  // they cover. With `final` (the document ends with `text`) that is all of them.
  // Without, encoding stops where more text could change the result: before an added
  // token that may continue, before the last regex piece that may continue (a match
  // that reached the end, or unmatched text at the end), and with NFC before the last
  // character that may combine with what follows; the caller gives the rest
  // again in front of the next text. So a document encoded in segments gets exactly
  // the ids of the whole: the library's regexes decide a piece from its own text and
  // what follows, never from what precedes (lookbehind is refused). A single piece
  // (e.g. a run of a million spaces) is held whole until it ends.
  // Errors: PCRE2's (match limit, JIT stack), naming the pattern's JSON path.
  absl::StatusOr<std::size_t> Encode(std::string_view text, bool final, std::vector<int>* ids);

 private:
  struct Span {
    std::size_t begin, end;
    int id;  // an added token's, or -1 for text
  };
  // A normalization change: source bytes -> normalized bytes.
  struct Change {
    std::size_t src_begin, src_length, dst_begin, dst_length;
  };
  // Cuts the added tokens of passes_[pass] out of `text` into *out (tokens and the text
  // between them). With `open`, only tokens certain to be complete before *bound are
  // cut, the rest stays one open span (last), and *bound shrinks to what is decided.
  void CutAddedTokens(int pass, std::string_view text, bool open, std::size_t* bound, std::vector<Span>* out) const;
  // A stretch without first-pass tokens: normalized, second-pass tokens, regexes, BPE.
  // Returns the bytes of `raw` covered (all of them unless `open`).
  absl::StatusOr<std::size_t> EncodeStretch(std::string_view raw, bool open, std::vector<int>* ids);
  std::size_t LastNormalizationBoundary(std::string_view raw) const;
  bool BoundaryAt(std::string_view raw, std::size_t at) const;
  void MergePiece(std::string_view piece, std::vector<int>* ids);
  int Find(std::size_t level, std::string_view text, std::size_t start, bool partial, std::size_t* begin,
           std::size_t* end);
  absl::Status RegexError(std::size_t level, int code) const;
  absl::Status SplitAndMerge(std::size_t level, std::string_view text, std::vector<int>* ids);
  absl::StatusOr<std::size_t> SplitOpen(std::size_t level, std::string_view text, std::vector<int>* ids);
  void Merge(std::string_view piece, std::vector<int>* ids);

  const HfTokenizer* tok_;
  void* match_data_ = nullptr;
  void* jit_stack_ = nullptr;
  void* match_context_ = nullptr;
  absl::flat_hash_map<std::string, std::vector<int>> cache_;
  // The merge loop's scratch: symbols as a linked list over the piece's bytes.
  std::vector<int> sym_id_, sym_prev_, sym_next_;
  std::vector<std::pair<int, int>> heap_;  // (rank, position), a min-heap
  // NFC of an open stretch: the text, its changes, and where each piece ended
  // (normalized offset, ids so far); mark_base_ is the text's start while marking.
  std::string normalized_;
  std::vector<Change> changes_;
  std::vector<std::pair<std::size_t, std::size_t>> marks_;
  const char* mark_base_ = nullptr;
};

}  // namespace trainyard::tokenize
