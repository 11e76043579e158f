#include "client/tokenize/hf_tokenizer_json.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/text.h"

namespace trainyard::tokenize {

const char kByteLevelPattern[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

using nlohmann::json;

// Ids above this are refused: they would make the dataset's vocabulary absurd, and
// the limit keeps every id and sum of ids inside int.
constexpr std::int64_t kMaxId = (std::int64_t{1} << 30) - 1;
// Deeper nesting than any tokenizer.json has; bounds the parser on hostile files.
constexpr int kMaxDepth = 64;

// ByteLevel's alphabet: the printable Latin-1 bytes stand for themselves, the other
// 68 bytes for U+0100 and up, in byte order (GPT-2's bytes_to_unicode).
struct ByteAlphabet {
  std::uint32_t to_char[256];
  int to_byte[324];  // by code point, -1 outside the alphabet
  ByteAlphabet() {
    std::fill(std::begin(to_byte), std::end(to_byte), -1);
    std::uint32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_char[b] = printable ? static_cast<std::uint32_t>(b) : extra++;
      to_byte[to_char[b]] = b;
    }
  }
};
const ByteAlphabet& Alphabet() {
  static const ByteAlphabet* alphabet = new ByteAlphabet();
  return *alphabet;
}

// The bytes a byte-level vocabulary key stands for; false when a character is outside
// the alphabet. Keys are valid UTF-8 (the JSON parser checked).
bool DecodeByteLevel(const std::string& key, std::string* bytes) {
  bytes->clear();
  for (std::size_t i = 0; i < key.size();) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    std::uint32_t cp = 0;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < key.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(key[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return false;  // 3- and 4-byte characters are all past U+0143
    }
    const int b = ByteLevelByte(cp);
    if (b < 0) return false;
    bytes->push_back(static_cast<char>(b));
  }
  return true;
}

class Reader {
 public:
  explicit Reader(std::string name) : name_(std::move(name)) {}

  absl::Status Fail(const std::string& path, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": ", path, ": ", what));
  }
  // The value at `path` must be of `type`.
  absl::Status Expect(const json& v, const std::string& path, json::value_t type, const char* type_name) const {
    if (v.type() == type) return absl::OkStatus();
    if (type == json::value_t::number_integer && v.type() == json::value_t::number_unsigned) return absl::OkStatus();
    return Fail(path, absl::StrCat("expected ", type_name, ", found ", v.type_name(), " ", Shown(v)));
  }
  // The value as JSON, ASCII only (\u escapes) so that the clip cuts no character.
  static std::string Shown(const json& v) { return Clip(v.dump(-1, ' ', true, json::error_handler_t::replace), 80); }
  // A member that must be absent, null or `allowed` (false, 0, an empty string...).
  absl::Status MustBe(const json& object, const std::string& path, const char* key, const json& allowed,
                      absl::string_view why) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null() || *it == allowed) return absl::OkStatus();
    return Fail(absl::StrCat(path, ".", key), absl::StrCat(Shown(*it), ": ", why));
  }
  absl::StatusOr<const json*> Member(const json& object, const std::string& path, const char* key) const {
    auto it = object.find(key);
    if (it == object.end()) return Fail(path, absl::StrCat("missing member \"", key, "\""));
    return &*it;
  }
  absl::StatusOr<std::string> Type(const json& object, const std::string& path) const {
    if (absl::Status s = Expect(object, path, json::value_t::object, "an object"); !s.ok()) return s;
    auto it = object.find("type");
    if (it == object.end()) return Fail(path, "missing member \"type\"");
    if (!it->is_string()) return Fail(path + ".type", absl::StrCat("expected a string, found ", Shown(*it)));
    return it->get<std::string>();
  }
  absl::StatusOr<int> Id(const json& v, const std::string& path) const {
    if (!v.is_number_integer()) return Fail(path, absl::StrCat("expected a token id, found ", Shown(v)));
    if (v.is_number_unsigned() ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxId)
                               : (v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > kMaxId)) {
      return Fail(path, absl::StrCat("token id ", Shown(v), " outside 0..", kMaxId));
    }
    return static_cast<int>(v.get<std::int64_t>());
  }

 private:
  std::string name_;
};

absl::Status ReadModel(const Reader& r, const json& model, HfTokenizerSpec* spec,
                       absl::flat_hash_map<int, std::string>* id_owner) {
  absl::StatusOr<std::string> type = r.Type(model, "model");
  if (!type.ok()) return type.status();
  if (*type != "BPE") return r.Fail("model.type", absl::StrCat(Quote(*type), ": only BPE is supported"));
  TY_RETURN_IF_ERROR(
      r.MustBe(model, "model", "dropout", json(0), "BPE dropout is not supported (encoding must be deterministic)"));
  TY_RETURN_IF_ERROR(r.MustBe(model, "model", "byte_fallback", json(false),
                              "byte_fallback is not supported (byte-level BPE needs none)"));
  TY_RETURN_IF_ERROR(
      r.MustBe(model, "model", "continuing_subword_prefix", json(""), "continuing_subword_prefix is not supported"));
  TY_RETURN_IF_ERROR(r.MustBe(model, "model", "end_of_word_suffix", json(""), "end_of_word_suffix is not supported"));
  if (auto it = model.find("ignore_merges"); it != model.end() && !it->is_null()) {
    TY_RETURN_IF_ERROR(r.Expect(*it, "model.ignore_merges", json::value_t::boolean, "a boolean"));
    spec->ignore_merges = it->get<bool>();
  }

  absl::StatusOr<const json*> vocab = r.Member(model, "model", "vocab");
  if (!vocab.ok()) return vocab.status();
  TY_RETURN_IF_ERROR(r.Expect(**vocab, "model.vocab", json::value_t::object, "an object"));
  absl::flat_hash_map<std::string, int> by_key;  // the keys as written, for the merges
  by_key.reserve((*vocab)->size());
  spec->vocab.reserve((*vocab)->size());
  std::string bytes;
  for (auto it = (*vocab)->begin(); it != (*vocab)->end(); ++it) {
    const std::string path = absl::StrCat("model.vocab[\"", Quote(it.key()), "\"]");
    absl::StatusOr<int> id = r.Id(it.value(), path);
    if (!id.ok()) return id.status();
    auto [owner, fresh] = id_owner->emplace(*id, it.key());
    if (!fresh) {
      return r.Fail(path, absl::StrCat("id ", *id, " is also the id of \"", Quote(owner->second), "\""));
    }
    by_key.emplace(it.key(), *id);
    spec->vocab_size = std::max(spec->vocab_size, *id + 1);
    if (DecodeByteLevel(it.key(), &bytes)) spec->vocab.emplace(bytes, *id);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = spec->vocab.find(std::string(1, static_cast<char>(b)));
    if (it == spec->vocab.end()) {
      std::string key;
      const std::uint32_t cp = Alphabet().to_char[b];
      if (cp < 0x80) {
        key.push_back(static_cast<char>(cp));
      } else {
        key.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        key.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
      return r.Fail("model.vocab",
                    absl::StrCat("no entry \"", Quote(key), "\" for byte 0x", absl::Hex(b, absl::kZeroPad2),
                                 ": a byte-level vocabulary holds all 256 bytes"));
    }
    spec->byte_ids[b] = it->second;
  }

  absl::StatusOr<const json*> merges = r.Member(model, "model", "merges");
  if (!merges.ok()) return merges.status();
  TY_RETURN_IF_ERROR(r.Expect(**merges, "model.merges", json::value_t::array, "an array"));
  spec->merges.reserve((*merges)->size());
  absl::flat_hash_set<std::uint64_t> seen;
  for (std::size_t i = 0; i < (*merges)->size(); ++i) {
    const json& m = (**merges)[i];
    const std::string path = absl::StrCat("model.merges[", i, "]");
    std::string left, right;
    if (m.is_string()) {
      // "a b": byte-level keys hold no space (it is written as U+0120).
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return r.Fail(path, absl::StrCat(r.Shown(m), ": expected two tokens separated by one space"));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return r.Fail(path, absl::StrCat("expected \"a b\" or [\"a\", \"b\"], found ", r.Shown(m)));
    }
    auto l = by_key.find(left);
    auto rt = by_key.find(right);
    if (l == by_key.end() || rt == by_key.end()) {
      return r.Fail(path, absl::StrCat("\"", Quote(l == by_key.end() ? left : right), "\" is not in model.vocab"));
    }
    auto result = by_key.find(left + right);
    if (result == by_key.end()) {
      return r.Fail(path, absl::StrCat("the merged token \"", Quote(left + right), "\" is not in model.vocab"));
    }
    // A repeated pair would have two ranks; the library keeps the last, which no
    // tokenizer means to rely on.
    if (!seen.insert((static_cast<std::uint64_t>(l->second) << 32) | static_cast<std::uint32_t>(rt->second)).second) {
      return r.Fail(path, absl::StrCat(r.Shown(m), " repeats an earlier merge"));
    }
    spec->merges.push_back(HfMerge{l->second, rt->second, result->second});
  }
  // unk_token may name a token; with all 256 bytes in the vocabulary it is never used.
  return absl::OkStatus();
}

absl::Status ReadAddedTokens(const Reader& r, const json& root, HfTokenizerSpec* spec,
                             absl::flat_hash_map<int, std::string>* id_owner) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  TY_RETURN_IF_ERROR(r.Expect(*it, "added_tokens", json::value_t::array, "an array"));
  absl::flat_hash_set<std::string> contents;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string path = absl::StrCat("added_tokens[", i, "]");
    TY_RETURN_IF_ERROR(r.Expect(t, path, json::value_t::object, "an object"));
    absl::StatusOr<const json*> id = r.Member(t, path, "id");
    if (!id.ok()) return id.status();
    absl::StatusOr<int> value = r.Id(**id, path + ".id");
    if (!value.ok()) return value.status();
    absl::StatusOr<const json*> content = r.Member(t, path, "content");
    if (!content.ok()) return content.status();
    TY_RETURN_IF_ERROR(r.Expect(**content, path + ".content", json::value_t::string, "a string"));
    HfAddedToken token{(*content)->get<std::string>(), *value, false};
    if (token.content.empty()) return r.Fail(path + ".content", "an added token cannot be empty");
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      TY_RETURN_IF_ERROR(r.MustBe(t, path, flag, json(false), "not supported for added tokens"));
    }
    if (auto n = t.find("normalized"); n != t.end() && !n->is_null()) {
      TY_RETURN_IF_ERROR(r.Expect(*n, path + ".normalized", json::value_t::boolean, "a boolean"));
      token.normalized = n->get<bool>();
    }
    // The same id as a vocabulary entry is the usual case (the trainer puts special
    // tokens in both) only for the same text.
    auto [owner, fresh] = id_owner->emplace(token.id, token.content);
    if (!fresh && owner->second != token.content) {
      return r.Fail(path + ".id", absl::StrCat("id ", token.id, " of \"", Quote(token.content),
                                               "\" is also the id of \"", Quote(owner->second), "\""));
    }
    if (!contents.insert(token.content).second) {
      return r.Fail(path + ".content", absl::StrCat("\"", Quote(token.content), "\" is added twice"));
    }
    spec->vocab_size = std::max(spec->vocab_size, token.id + 1);
    spec->added_tokens.push_back(std::move(token));
  }
  return absl::OkStatus();
}

absl::Status ReadNormalizer(const Reader& r, const json& root, HfTokenizerSpec* spec) {
  auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  absl::StatusOr<std::string> type = r.Type(*it, "normalizer");
  if (!type.ok()) return type.status();
  const json* single = &*it;
  if (*type == "Sequence") {
    auto list = it->find("normalizers");
    if (list != it->end() && list->is_array() && list->empty()) return absl::OkStatus();
    if (list != it->end() && list->is_array() && list->size() == 1) single = &(*list)[0];
  }
  if (single->is_object() && single->value("type", json()) == json("NFC")) {
    spec->nfc = true;
    return absl::OkStatus();
  }
  return r.Fail("normalizer", absl::StrCat(r.Shown(*it), ": supported are null and NFC (alone or in a Sequence)"));
}

absl::Status ReadSplit(const Reader& r, const json& step, const std::string& path, HfTokenizerSpec* spec) {
  TY_RETURN_IF_ERROR(r.MustBe(step, path, "invert", json(false), "only invert false is supported"));
  absl::StatusOr<const json*> behavior = r.Member(step, path, "behavior");
  if (!behavior.ok()) return behavior.status();
  if (**behavior != json("Isolated")) {
    return r.Fail(path + ".behavior", absl::StrCat(r.Shown(**behavior), ": only Isolated is supported"));
  }
  absl::StatusOr<const json*> pattern = r.Member(step, path, "pattern");
  if (!pattern.ok()) return pattern.status();
  TY_RETURN_IF_ERROR(r.Expect(**pattern, path + ".pattern", json::value_t::object, "an object"));
  if (auto re = (*pattern)->find("Regex"); re != (*pattern)->end() && re->is_string()) {
    spec->split_patterns.push_back(re->get<std::string>());
    spec->split_paths.push_back(path + ".pattern.Regex");
  } else if (auto s = (*pattern)->find("String"); s != (*pattern)->end() && s->is_string()) {
    // \Q...\E quotes it, with any \E inside split out of the quote.
    std::string quoted = "\\Q";
    const std::string literal = s->get<std::string>();
    if (literal.empty()) return r.Fail(path + ".pattern.String", "an empty pattern splits nothing");
    for (std::size_t i = 0; i < literal.size(); ++i) {
      if (literal.compare(i, 2, "\\E") == 0) {
        quoted += "\\E\\\\E\\Q";
        ++i;
      } else {
        quoted += literal[i];
      }
    }
    spec->split_patterns.push_back(quoted + "\\E");
    spec->split_paths.push_back(path + ".pattern.String");
  } else {
    return r.Fail(path + ".pattern",
                  absl::StrCat(r.Shown(**pattern), ": expected {\"Regex\": ...} or {\"String\": ...}"));
  }
  return absl::OkStatus();
}

absl::Status ReadPreTokenizer(const Reader& r, const json& root, HfTokenizerSpec* spec) {
  auto it = root.find("pre_tokenizer");
  if (it == root.end() || it->is_null()) {
    return r.Fail("pre_tokenizer", "null: a byte-level BPE needs the ByteLevel pre-tokenizer");
  }
  std::vector<std::pair<const json*, std::string>> steps;
  absl::StatusOr<std::string> type = r.Type(*it, "pre_tokenizer");
  if (!type.ok()) return type.status();
  if (*type == "Sequence") {
    absl::StatusOr<const json*> list = r.Member(*it, "pre_tokenizer", "pretokenizers");
    if (!list.ok()) return list.status();
    TY_RETURN_IF_ERROR(r.Expect(**list, "pre_tokenizer.pretokenizers", json::value_t::array, "an array"));
    for (std::size_t i = 0; i < (*list)->size(); ++i) {
      steps.emplace_back(&(**list)[i], absl::StrCat("pre_tokenizer.pretokenizers[", i, "]"));
    }
  } else {
    steps.emplace_back(&*it, "pre_tokenizer");
  }
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& [step, path] = steps[i];
    absl::StatusOr<std::string> step_type = r.Type(*step, path);
    if (!step_type.ok()) return step_type.status();
    if (*step_type == "Split" && i + 1 < steps.size()) {
      TY_RETURN_IF_ERROR(ReadSplit(r, *step, path, spec));
    } else if (*step_type == "ByteLevel" && i + 1 == steps.size()) {
      TY_RETURN_IF_ERROR(
          r.MustBe(*step, path, "add_prefix_space", json(false), "only add_prefix_space false is supported"));
      bool use_regex = true;
      if (auto u = step->find("use_regex"); u != step->end() && !u->is_null()) {
        TY_RETURN_IF_ERROR(r.Expect(*u, path + ".use_regex", json::value_t::boolean, "a boolean"));
        use_regex = u->get<bool>();
      }
      if (use_regex) {
        spec->split_patterns.push_back(kByteLevelPattern);
        spec->split_paths.push_back(path + ".use_regex");
      }
    } else {
      return r.Fail(path + ".type",
                    absl::StrCat(Quote(*step_type), ": supported are Split steps followed by one ByteLevel, last"));
    }
  }
  if (steps.empty()) return r.Fail("pre_tokenizer.pretokenizers", "empty: a byte-level BPE needs ByteLevel");
  return absl::OkStatus();
}

// The ids of a special token of the template, by name.
absl::StatusOr<std::vector<int>> SpecialIds(const Reader& r, const json& processor, const std::string& path,
                                            const std::string& name) {
  const std::string at = absl::StrCat(path, ".special_tokens[\"", Quote(name), "\"]");
  auto specials = processor.find("special_tokens");
  if (specials == processor.end() || !specials->is_object() || !specials->contains(name)) {
    return r.Fail(at, "the template names a special token that special_tokens does not define");
  }
  const json& entry = (*specials)[name];
  TY_RETURN_IF_ERROR(r.Expect(entry, at, json::value_t::object, "an object"));
  absl::StatusOr<const json*> ids = r.Member(entry, at, "ids");
  if (!ids.ok()) return ids.status();
  TY_RETURN_IF_ERROR(r.Expect(**ids, at + ".ids", json::value_t::array, "an array"));
  std::vector<int> out;
  for (std::size_t i = 0; i < (*ids)->size(); ++i) {
    absl::StatusOr<int> id = r.Id((**ids)[i], absl::StrCat(at, ".ids[", i, "]"));
    if (!id.ok()) return id.status();
    out.push_back(*id);
  }
  return out;
}

absl::Status ReadTemplate(const Reader& r, const json& processor, const std::string& path, HfTokenizerSpec* spec) {
  if (spec->has_template) return r.Fail(path, "a second TemplateProcessing is not supported");
  spec->has_template = true;
  absl::StatusOr<const json*> single = r.Member(processor, path, "single");
  if (!single.ok()) return single.status();
  TY_RETURN_IF_ERROR(r.Expect(**single, path + ".single", json::value_t::array, "an array"));
  bool seen_a = false;
  for (std::size_t i = 0; i < (*single)->size(); ++i) {
    const json& piece = (**single)[i];
    const std::string at = absl::StrCat(path, ".single[", i, "]");
    if (piece.is_object() && piece.size() == 1 && piece.contains("Sequence")) {
      const json& seq = piece["Sequence"];
      if (seen_a || !seq.is_object() || seq.value("id", json()) != json("A")) {
        return r.Fail(at, absl::StrCat(r.Shown(piece), ": expected $A once"));
      }
      seen_a = true;
    } else if (piece.is_object() && piece.size() == 1 && piece.contains("SpecialToken")) {
      const json& special = piece["SpecialToken"];
      if (!special.is_object() || !special.contains("id") || !special["id"].is_string()) {
        return r.Fail(at, absl::StrCat(r.Shown(piece), ": expected {\"SpecialToken\": {\"id\": NAME, ...}}"));
      }
      absl::StatusOr<std::vector<int>> ids = SpecialIds(r, processor, path, special["id"].get<std::string>());
      if (!ids.ok()) return ids.status();
      std::vector<int>& into = seen_a ? spec->eos_ids : spec->bos_ids;
      into.insert(into.end(), ids->begin(), ids->end());
    } else {
      return r.Fail(at, absl::StrCat(r.Shown(piece), ": expected a Sequence or a SpecialToken"));
    }
  }
  if (!seen_a) return r.Fail(path + ".single", "the template has no $A");
  for (int id : spec->bos_ids) spec->vocab_size = std::max(spec->vocab_size, id + 1);
  for (int id : spec->eos_ids) spec->vocab_size = std::max(spec->vocab_size, id + 1);
  return absl::OkStatus();
}

absl::Status ReadPostProcessor(const Reader& r, const json& processor, const std::string& path, HfTokenizerSpec* spec) {
  if (processor.is_null()) return absl::OkStatus();
  absl::StatusOr<std::string> type = r.Type(processor, path);
  if (!type.ok()) return type.status();
  if (*type == "ByteLevel") return absl::OkStatus();  // offsets only; the ids are unchanged
  if (*type == "TemplateProcessing") return ReadTemplate(r, processor, path, spec);
  if (*type == "Sequence") {
    absl::StatusOr<const json*> list = r.Member(processor, path, "processors");
    if (!list.ok()) return list.status();
    TY_RETURN_IF_ERROR(r.Expect(**list, path + ".processors", json::value_t::array, "an array"));
    for (std::size_t i = 0; i < (*list)->size(); ++i) {
      TY_RETURN_IF_ERROR(ReadPostProcessor(r, (**list)[i], absl::StrCat(path, ".processors[", i, "]"), spec));
    }
    return absl::OkStatus();
  }
  return r.Fail(path + ".type",
                absl::StrCat(Quote(*type), ": supported are TemplateProcessing, ByteLevel and a Sequence of them"));
}

}  // namespace

int ByteLevelByte(std::uint32_t code_point) { return code_point < 324 ? Alphabet().to_byte[code_point] : -1; }

absl::StatusOr<HfTokenizerSpec> ParseHfTokenizerJson(std::string_view text, const std::string& name) {
  const Reader r(name);
  json root;
  try {
    // The callback bounds the nesting before the parser builds it.
    root = json::parse(text.begin(), text.end(), [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxDepth) throw std::length_error("nested deeper than 64 levels");
      return true;
    });
  } catch (const json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not valid JSON at byte ", e.byte, ": ", e.what()));
  } catch (const std::length_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": JSON ", e.what()));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected a JSON object, found ", root.type_name()));
  }
  HfTokenizerSpec spec;
  absl::flat_hash_map<int, std::string> id_owner;
  absl::StatusOr<const json*> model = r.Member(root, "(top level)", "model");
  if (!model.ok()) return model.status();
  TY_RETURN_IF_ERROR(ReadModel(r, **model, &spec, &id_owner));
  TY_RETURN_IF_ERROR(ReadAddedTokens(r, root, &spec, &id_owner));
  TY_RETURN_IF_ERROR(ReadNormalizer(r, root, &spec));
  TY_RETURN_IF_ERROR(ReadPreTokenizer(r, root, &spec));
  if (auto it = root.find("post_processor"); it != root.end()) {
    TY_RETURN_IF_ERROR(ReadPostProcessor(r, *it, "post_processor", &spec));
  }
  for (const char* key : {"truncation", "padding"}) {
    if (auto it = root.find(key); it != root.end() && !it->is_null()) {
      return r.Fail(key, absl::StrCat(r.Shown(*it), ": not supported (null only)"));
    }
  }
  return spec;
}

}  // namespace trainyard::tokenize
