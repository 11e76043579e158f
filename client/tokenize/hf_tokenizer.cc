#include "client/tokenize/hf_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/bytestream.h>
#include <unicode/edits.h>
#include <unicode/errorcode.h>
#include <unicode/normalizer2.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/text.h"

namespace trainyard::tokenize {
namespace {

constexpr std::size_t kTokenizerFileCap = std::size_t{256} << 20;
// Pieces merged once are remembered up to this many; then the cache starts over.
constexpr std::size_t kCacheEntries = std::size_t{1} << 18;
// Pieces longer than this are merged every time (rare, and costly to keep).
constexpr std::size_t kCachedPieceBytes = 256;
// PCRE2's JIT stack: enough for the backtracking of any pattern above on long runs.
constexpr std::size_t kJitStackBytes = std::size_t{8} << 20;

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) return absl::StrCat("PCRE2 error ", code);
  return reinterpret_cast<const char*>(buffer);
}

// Constructs whose meaning in Oniguruma (the library's engine) differs from PCRE2's:
// \h and \H, and ^ and $ outside character classes (line anchors in Oniguruma's Ruby
// syntax). "" when there is none.
std::string OnigurumaDifference(const std::string& pattern) {
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 'h' || e == 'H') return absl::StrCat("\\", std::string(1, e));
      if (e == 'Q') {  // literal up to \E
        const std::size_t end = pattern.find("\\E", i + 1);
        if (end == std::string::npos) return "";
        i = end + 1;
      }
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      continue;
    }
    if (c == '[') {
      in_class = true;
      // A ] right after [ or [^ is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') ++i;
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') ++i;
    } else if (c == '^' || c == '$') {
      return std::string(1, c);
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(const std::string& path) {
  const std::string name = absl::StrCat("--tokenizer ", Quoted(path));
  absl::StatusOr<std::string> bytes = ReadFile(path, kTokenizerFileCap);
  if (!bytes.ok()) return absl::Status(bytes.status().code(), absl::StrCat(name, ": ", bytes.status().message()));
  if (bytes->empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": the file is empty"));
  return FromJson(*bytes, name);
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromJson(std::string_view json, const std::string& name) {
  absl::StatusOr<HfTokenizerSpec> spec = ParseHfTokenizerJson(json, name);
  if (!spec.ok()) return spec.status();
  std::unique_ptr<HfTokenizer> tok(new HfTokenizer());
  tok->spec_ = std::move(*spec);
  for (const HfAddedToken& t : tok->spec_.added_tokens) {
    AddedPass& pass = tok->passes_[t.normalized ? 1 : 0];
    pass.by_first_byte[static_cast<unsigned char>(t.content[0])].push_back(&t);
    pass.longest = std::max(pass.longest, t.content.size());
  }
  for (AddedPass& pass : tok->passes_) {
    for (auto& list : pass.by_first_byte) {
      std::stable_sort(list.begin(), list.end(), [](const HfAddedToken* a, const HfAddedToken* b) {
        return a->content.size() > b->content.size();
      });
    }
  }
  for (std::size_t i = 0; i < tok->spec_.split_patterns.size(); ++i) {
    const std::string& pattern = tok->spec_.split_patterns[i];
    const std::string where = absl::StrCat(name, ": ", tok->spec_.split_paths[i], ": ");
    if (std::string d = OnigurumaDifference(pattern); !d.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "the pattern uses ", d, ", which means something else in the library's regex engine (Oniguruma)"));
    }
    int code = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                   &code, &offset, nullptr);
    if (re == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "not a regex PCRE2 reads, at character ", offset, ": ", Pcre2Message(code)));
    }
    tok->regexes_.push_back(re);
    std::uint32_t min_length = 0, lookbehind = 0;
    pcre2_pattern_info(re, PCRE2_INFO_MINLENGTH, &min_length);
    pcre2_pattern_info(re, PCRE2_INFO_MAXLOOKBEHIND, &lookbehind);
    if (min_length == 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, "the pattern can match the empty string"));
    }
    // Segments would start where the whole text has characters before: a pattern that
    // looks behind (lookbehind, \b, \B) could split them differently.
    if (lookbehind > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "patterns that look behind (lookbehind, \\b, \\B) are not supported"));
    }
    // Without JIT (a platform without it) pcre2_match interprets: slower, same result.
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
  }
  if (tok->spec_.nfc) {
    UErrorCode error = U_ZERO_ERROR;
    tok->nfc_ = icu::Normalizer2::getNFCInstance(error);
    if (U_FAILURE(error)) {
      return absl::InternalError(absl::StrCat(name, ": ICU has no NFC normalizer: ", u_errorName(error)));
    }
  }
  tok->merges_.reserve(tok->spec_.merges.size());
  for (std::size_t rank = 0; rank < tok->spec_.merges.size(); ++rank) {
    const HfMerge& m = tok->spec_.merges[rank];
    tok->merges_.emplace((static_cast<std::uint64_t>(m.left) << 32) | static_cast<std::uint32_t>(m.right),
                         std::make_pair(static_cast<int>(rank), m.result));
  }
  return tok;
}

HfTokenizer::~HfTokenizer() {
  for (pcre2_code* re : regexes_) pcre2_code_free(re);
}

HfEncoder::HfEncoder(const HfTokenizer* tokenizer) : tok_(tokenizer) {
  match_data_ = pcre2_match_data_create(1, nullptr);
  jit_stack_ = pcre2_jit_stack_create(32 << 10, kJitStackBytes, nullptr);
  match_context_ = pcre2_match_context_create(nullptr);
  pcre2_jit_stack_assign(static_cast<pcre2_match_context*>(match_context_), nullptr,
                         static_cast<pcre2_jit_stack*>(jit_stack_));
}

HfEncoder::~HfEncoder() {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_));
  pcre2_jit_stack_free(static_cast<pcre2_jit_stack*>(jit_stack_));
  pcre2_match_context_free(static_cast<pcre2_match_context*>(match_context_));
}

void HfEncoder::CutAddedTokens(int pass_index, std::string_view text, bool open, std::size_t* bound,
                               std::vector<Span>* out) const {
  const HfTokenizer::AddedPass& pass = tok_->passes_[pass_index];
  // In an open text a token starting at p is certain only when every added token
  // starting there would end inside what is decided.
  const std::size_t limit = !open ? text.size() : (*bound + 1 > pass.longest ? *bound + 1 - pass.longest : 0);
  std::size_t gap = 0;
  for (std::size_t p = 0; pass.longest > 0 && p < limit;) {
    const HfAddedToken* hit = nullptr;
    for (const HfAddedToken* t : pass.by_first_byte[static_cast<unsigned char>(text[p])]) {
      if (t->content.size() <= text.size() - p &&
          std::memcmp(text.data() + p, t->content.data(), t->content.size()) == 0) {
        hit = t;
        break;
      }
    }
    if (hit == nullptr) {
      ++p;
      continue;
    }
    if (p > gap) out->push_back({gap, p, -1});
    out->push_back({p, p + hit->content.size(), hit->id});
    p += hit->content.size();
    gap = p;
  }
  if (open) {
    out->push_back({gap, text.size(), -1});  // always last, even empty
    *bound = std::max(std::min(limit, *bound), gap);
  } else if (gap < text.size()) {
    out->push_back({gap, text.size(), -1});
  }
}

absl::StatusOr<std::size_t> HfEncoder::Encode(std::string_view text, bool final, std::vector<int>* ids) {
  // Without `final`, the last stretch is open: what is in it is decided only up to
  // `bound`.
  std::size_t bound = text.size();
  std::vector<Span> spans;
  CutAddedTokens(0, text, !final, &bound, &spans);
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const Span& span = spans[i];
    if (span.id >= 0) {
      ids->push_back(span.id);
      continue;
    }
    const bool open = !final && i + 1 == spans.size();
    absl::StatusOr<std::size_t> done =
        EncodeStretch(text.substr(span.begin, (open ? bound : span.end) - span.begin), open, ids);
    if (!done.ok()) return done.status();
    if (open) return span.begin + *done;
  }
  return text.size();
}

absl::StatusOr<std::size_t> HfEncoder::EncodeStretch(std::string_view raw, bool open, std::vector<int>* ids) {
  // The normalizer works on what the first pass left, as in the library. When the
  // stretch is open, only the text before its last normalization boundary is final.
  std::string_view text = raw;
  const auto* nfc = static_cast<const icu::Normalizer2*>(tok_->nfc_);
  if (nfc != nullptr) {
    if (raw.size() > static_cast<std::size_t>(INT32_MAX)) {
      return absl::ResourceExhaustedError("one stretch of text without an added token is over 2 GiB (ICU's limit)");
    }
    if (open) raw = raw.substr(0, LastNormalizationBoundary(raw));
    normalized_.clear();
    changes_.clear();
    icu::StringByteSink<std::string> sink(&normalized_, static_cast<int32_t>(raw.size()));
    icu::Edits edits;
    UErrorCode error = U_ZERO_ERROR;
    nfc->normalizeUTF8(0, icu::StringPiece(raw.data(), static_cast<int32_t>(raw.size())), sink, open ? &edits : nullptr,
                       error);
    if (U_FAILURE(error)) return absl::InternalError(absl::StrCat("NFC: ", u_errorName(error)));
    if (open) {
      for (icu::Edits::Iterator it = edits.getCoarseChangesIterator(); it.next(error);) {
        changes_.push_back({static_cast<std::size_t>(it.sourceIndex()), static_cast<std::size_t>(it.oldLength()),
                            static_cast<std::size_t>(it.destinationIndex()), static_cast<std::size_t>(it.newLength())});
      }
    }
    text = normalized_;
  }
  std::size_t bound = text.size();
  std::vector<Span> spans;
  CutAddedTokens(1, text, open, &bound, &spans);
  const std::size_t ids_at_start = ids->size();
  // Normalized and open: where each piece ends (offset, ids so far), to go back to
  // the last one that maps to a raw position.
  marks_.clear();
  mark_base_ = nfc != nullptr && open ? text.data() : nullptr;
  std::size_t done = text.size();
  for (std::size_t i = 0; i < spans.size(); ++i) {
    const Span& span = spans[i];
    if (span.id >= 0) {
      ids->push_back(span.id);
      if (mark_base_ != nullptr) marks_.emplace_back(span.end, ids->size());
    } else if (!open || i + 1 < spans.size()) {
      TY_RETURN_IF_ERROR(SplitAndMerge(0, text.substr(span.begin, span.end - span.begin), ids));
    } else {
      absl::StatusOr<std::size_t> inner = SplitOpen(0, text.substr(span.begin, bound - span.begin), ids);
      if (!inner.ok()) return inner.status();
      done = span.begin + *inner;
    }
  }
  mark_base_ = nullptr;
  if (nfc == nullptr || !open) return done;
  // Back in raw offsets: the last piece end at or before `done` that is not inside a
  // normalization change and where the raw text has a boundary (so normalizing from
  // there again gives the rest of this normalized text).
  for (std::size_t k = marks_.size(); k-- > 0;) {
    const auto [end, count] = marks_[k];
    if (end > done) continue;
    std::size_t source = end;
    bool inside = false;
    for (const Change& c : changes_) {
      if (end <= c.dst_begin) break;
      if (end < c.dst_begin + c.dst_length) {
        inside = true;
        break;
      }
      source = source - c.dst_length + c.src_length;
    }
    if (inside || !BoundaryAt(raw, source)) continue;
    ids->resize(count);
    return source;
  }
  ids->resize(ids_at_start);
  return 0;
}

std::size_t HfEncoder::LastNormalizationBoundary(std::string_view raw) const {
  for (std::size_t q = raw.size(); q > 0;) {
    --q;
    if ((static_cast<unsigned char>(raw[q]) & 0xC0) == 0x80) continue;  // not a character start
    if (BoundaryAt(raw, q)) return q;
  }
  return 0;
}

bool HfEncoder::BoundaryAt(std::string_view raw, std::size_t at) const {
  if (at == 0 || at >= raw.size()) return true;
  UChar32 c = 0;
  int32_t i = static_cast<int32_t>(at);
  U8_NEXT(reinterpret_cast<const std::uint8_t*>(raw.data()), i, static_cast<int32_t>(raw.size()), c);
  return c >= 0 && static_cast<const icu::Normalizer2*>(tok_->nfc_)->hasBoundaryBefore(c);
}

int HfEncoder::Find(std::size_t level, std::string_view text, std::size_t start, bool partial, std::size_t* begin,
                    std::size_t* end) {
  auto* md = static_cast<pcre2_match_data*>(match_data_);
  const int rc = pcre2_match(tok_->regexes_[level], reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                             PCRE2_NO_UTF_CHECK | (partial ? PCRE2_PARTIAL_HARD : 0), md,
                             static_cast<pcre2_match_context*>(match_context_));
  if (rc == PCRE2_ERROR_NOMATCH) return 0;
  if (rc < 0 && rc != PCRE2_ERROR_PARTIAL) return rc;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  *begin = ov[0];
  *end = ov[1];
  return rc == PCRE2_ERROR_PARTIAL ? -1 : 1;
}

absl::Status HfEncoder::RegexError(std::size_t level, int code) const {
  return absl::ResourceExhaustedError(
      absl::StrCat("the regex at ", tok_->spec_.split_paths[level], " failed: ", Pcre2Message(code)));
}

absl::Status HfEncoder::SplitAndMerge(std::size_t level, std::string_view text, std::vector<int>* ids) {
  if (level == tok_->regexes_.size()) {
    Merge(text, ids);
    return absl::OkStatus();
  }
  // Isolated: each match is a piece, and so is the text between matches.
  std::size_t done = 0, begin = 0, end = 0;
  while (done < text.size()) {
    const int found = Find(level, text, done, false, &begin, &end);
    if (found < -1) return RegexError(level, found);
    if (found == 0) break;
    if (begin > done) TY_RETURN_IF_ERROR(SplitAndMerge(level + 1, text.substr(done, begin - done), ids));
    TY_RETURN_IF_ERROR(SplitAndMerge(level + 1, text.substr(begin, end - begin), ids));
    done = end;
  }
  if (done < text.size()) TY_RETURN_IF_ERROR(SplitAndMerge(level + 1, text.substr(done), ids));
  return absl::OkStatus();
}

absl::StatusOr<std::size_t> HfEncoder::SplitOpen(std::size_t level, std::string_view text, std::vector<int>* ids) {
  if (level == tok_->regexes_.size()) return 0;  // one piece, not ended yet
  // PCRE2_PARTIAL_HARD reports a match that reached the end of the text (greedy runs,
  // lookaheads) as partial: more text could change it. Matches before it are final, and
  // so is unmatched text that a final match closes.
  std::size_t done = 0, begin = 0, end = 0;
  while (done < text.size()) {
    const int found = Find(level, text, done, true, &begin, &end);
    if (found < -1) return RegexError(level, found);
    if (found == 1) {
      if (begin > done) TY_RETURN_IF_ERROR(SplitAndMerge(level + 1, text.substr(done, begin - done), ids));
      TY_RETURN_IF_ERROR(SplitAndMerge(level + 1, text.substr(begin, end - begin), ids));
      done = end;
      continue;
    }
    // Unmatched text from `done`: no match can start before the partial one (or the
    // end), so that much of it is certainly one piece at this level, whose end is not
    // known yet; the next level splits what it can of it.
    const std::size_t known = found == -1 ? begin : text.size();
    absl::StatusOr<std::size_t> inner = SplitOpen(level + 1, text.substr(done, known - done), ids);
    if (!inner.ok()) return inner.status();
    return done + *inner;
  }
  return done;
}

void HfEncoder::Merge(std::string_view piece, std::vector<int>* ids) {
  if (mark_base_ != nullptr) {
    MergePiece(piece, ids);
    marks_.emplace_back(static_cast<std::size_t>(piece.data() + piece.size() - mark_base_), ids->size());
    return;
  }
  MergePiece(piece, ids);
}

void HfEncoder::MergePiece(std::string_view piece, std::vector<int>* ids) {
  const HfTokenizerSpec& spec = tok_->spec_;
  if (piece.size() == 1) {
    ids->push_back(spec.byte_ids[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (spec.ignore_merges) {
    if (auto it = spec.vocab.find(absl::string_view(piece.data(), piece.size())); it != spec.vocab.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const bool cached = piece.size() <= kCachedPieceBytes;
  if (cached) {
    if (auto it = cache_.find(absl::string_view(piece.data(), piece.size())); it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  // Symbols are a linked list over the bytes; the heap holds (rank, position) of each
  // adjacent pair with a merge. The lowest rank merges first, the leftmost among equal
  // ranks (the same pair in several places); an entry whose pair has since changed is
  // dropped when it comes up.
  const int n = static_cast<int>(piece.size());
  sym_id_.resize(n);
  sym_prev_.resize(n);
  sym_next_.resize(n);
  for (int i = 0; i < n; ++i) {
    sym_id_[i] = spec.byte_ids[static_cast<unsigned char>(piece[i])];
    sym_prev_[i] = i - 1;
    sym_next_[i] = i + 1 < n ? i + 1 : -1;
  }
  heap_.clear();
  const auto rank_of = [this](int left, int right) -> const std::pair<int, int>* {
    auto it = tok_->merges_.find((static_cast<std::uint64_t>(left) << 32) | static_cast<std::uint32_t>(right));
    return it == tok_->merges_.end() ? nullptr : &it->second;
  };
  const auto push = [&](int pos) {
    const int next = sym_next_[pos];
    if (next < 0) return;
    if (const std::pair<int, int>* m = rank_of(sym_id_[pos], sym_id_[next])) {
      heap_.emplace_back(m->first, pos);
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
    }
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    const auto [rank, pos] = heap_.back();
    heap_.pop_back();
    if (sym_id_[pos] < 0) continue;  // merged into its left neighbour
    const int next = sym_next_[pos];
    if (next < 0) continue;
    const std::pair<int, int>* m = rank_of(sym_id_[pos], sym_id_[next]);
    if (m == nullptr || m->first != rank) continue;
    sym_id_[pos] = m->second;
    sym_id_[next] = -1;
    sym_next_[pos] = sym_next_[next];
    if (sym_next_[pos] >= 0) sym_prev_[sym_next_[pos]] = pos;
    if (sym_prev_[pos] >= 0) push(sym_prev_[pos]);
    push(pos);
  }
  const std::size_t first = ids->size();
  for (int i = 0; i >= 0; i = sym_next_[i]) ids->push_back(sym_id_[i]);
  if (cached) {
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(std::string(piece), std::vector<int>(ids->begin() + static_cast<std::ptrdiff_t>(first), ids->end()));
  }
}

}  // namespace trainyard::tokenize
