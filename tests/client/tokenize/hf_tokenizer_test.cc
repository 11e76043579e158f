// HfEncoder on small hand-written tokenizer.json files: the merge order (lowest rank
// first, leftmost among equal ranks), ignore_merges, the two added-token passes, and
// the property the tool's segments rest on: a text cut anywhere (at character starts)
// and fed piece by piece, each piece after what the last one left, gives the ids of the
// whole. The ids against the library itself: hf_tokenizer_test.py.
#include "client/tokenize/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace trainyard::tokenize {
namespace {

using nlohmann::json;

// The vocabulary key of `bytes` in ByteLevel's alphabet (GPT-2's bytes_to_unicode),
// written out here independently of the code under test.
std::string Key(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    int cp = b;
    if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
      int n = 0;
      for (int c = 0; c < b; ++c) n += ((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE) ? 0 : 1;
      cp = 256 + n;
    }
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

// Bytes are ids 0..255; each merge adds the next id.
json Tokenizer(const std::vector<std::pair<std::string, std::string>>& merges, json pre_tokenizer,
               json added = json::array(), bool ignore_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[Key(std::string(1, static_cast<char>(b)))] = b;
  json merge_list = json::array();
  for (const auto& [l, r] : merges) {
    if (!vocab.contains(Key(l + r))) vocab[Key(l + r)] = vocab.size();
    merge_list.push_back(json::array({Key(l), Key(r)}));
  }
  return json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer", pre_tokenizer},
              {"post_processor", nullptr},
              {"decoder", nullptr},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", ignore_merges},
                {"vocab", vocab},
                {"merges", merge_list}}}};
}

const json kByteLevel = {
    {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};

std::unique_ptr<HfTokenizer> Load(const json& j) {
  absl::StatusOr<std::unique_ptr<HfTokenizer>> tok = HfTokenizer::FromJson(j.dump(), "t.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

std::vector<int> Encode(const HfTokenizer& tok, const std::string& text) {
  HfEncoder encoder(&tok);
  std::vector<int> ids;
  absl::StatusOr<std::size_t> done = encoder.Encode(text, true, &ids);
  EXPECT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(*done, text.size());
  return ids;
}

// `text` fed in pieces ending at `cuts`, as the tool feeds segments.
std::vector<int> EncodeInPieces(const HfTokenizer& tok, const std::string& text, std::vector<std::size_t> cuts) {
  HfEncoder encoder(&tok);
  std::vector<int> ids;
  std::string pending;
  std::size_t at = 0;
  cuts.push_back(text.size());
  for (std::size_t i = 0; i < cuts.size(); ++i) {
    pending += text.substr(at, cuts[i] - at);
    at = cuts[i];
    const bool final = i + 1 == cuts.size();
    absl::StatusOr<std::size_t> done = encoder.Encode(pending, final, &ids);
    EXPECT_TRUE(done.ok()) << done.status();
    if (final) {
      EXPECT_EQ(*done, pending.size());
    }
    pending.erase(0, *done);
  }
  return ids;
}

TEST(HfTokenizerTest, LowestRankMergesFirstAndLeftmostAmongEquals) {
  // "aaa": (a,a) at 0 and 1 have one rank; the leftmost merges: [aa, a].
  std::unique_ptr<HfTokenizer> tok = Load(Tokenizer({{"a", "a"}}, kByteLevel));
  EXPECT_EQ(Encode(*tok, "aaa"), (std::vector<int>{256, 'a'}));
  // "abc" with (b,c) ranked before (a,b): [a, bc], though (a,b) is further left.
  tok = Load(Tokenizer({{"b", "c"}, {"a", "b"}}, kByteLevel));
  EXPECT_EQ(Encode(*tok, "abc"), (std::vector<int>{'a', 256}));
  // A merge made possible by an earlier one: (ab, c) after (a, b).
  tok = Load(Tokenizer({{"a", "b"}, {"ab", "c"}}, kByteLevel));
  EXPECT_EQ(Encode(*tok, "abcab"), (std::vector<int>{257, 256}));
}

TEST(HfTokenizerTest, IgnoreMergesTakesAWholePieceFromTheVocabulary) {
  // "xyz" is in the vocabulary, but no merge reaches it.
  json j = Tokenizer({{"a", "b"}}, kByteLevel);
  j["model"]["vocab"][Key("xyz")] = 300;
  std::unique_ptr<HfTokenizer> tok = Load(j);
  EXPECT_EQ(Encode(*tok, "xyz"), (std::vector<int>{'x', 'y', 'z'}));
  j["model"]["ignore_merges"] = true;
  tok = Load(j);
  EXPECT_EQ(Encode(*tok, "xyz"), (std::vector<int>{300}));
  EXPECT_EQ(Encode(*tok, "xyz ab"), (std::vector<int>{300, ' ', 256}));
}

TEST(HfTokenizerTest, AddedTokensLeftmostLongestNonNormalizedFirst) {
  json added = json::array({{{"id", 400}, {"content", "<s>"}, {"normalized", false}},
                            {{"id", 401}, {"content", "<s>x"}, {"normalized", false}},
                            {{"id", 402}, {"content", "s>xy"}, {"normalized", true}}});
  std::unique_ptr<HfTokenizer> tok = Load(Tokenizer({}, kByteLevel, added));
  // Longest at the leftmost start; the normalized token only in what is left.
  EXPECT_EQ(Encode(*tok, "a<s>xy"), (std::vector<int>{'a', 401, 'y'}));
  EXPECT_EQ(Encode(*tok, "<s>"), (std::vector<int>{400}));
  EXPECT_EQ(Encode(*tok, "s>xy<s"), (std::vector<int>{402, '<', 's'}));
  EXPECT_EQ(tok->vocab_size(), 403);
}

TEST(HfTokenizerTest, PiecesFedInAnyCutsGiveTheIdsOfTheWhole) {
  const json split = {{"type", "Split"},
                      {"pattern",
                       {{"Regex",
                         "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                         "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  const json llama3 = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({split, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  json added = json::array({{{"id", 500}, {"content", "<|end|>"}, {"normalized", false}},
                            {{"id", 501}, {"content", "<|end|>!"}, {"normalized", false}},
                            {{"id", 502}, {"content", "zz top"}, {"normalized", true}}});
  const std::vector<std::pair<std::string, std::string>> merges = {{" ", " "},   {"  ", "  "}, {"t", "h"}, {"th", "e"},
                                                                   {" ", "the"}, {"\n", "\n"}, {"1", "2"}, {"12", "3"}};
  const std::string text =
      "the  the\n\n   \n  x 1234567 <|end|>! <|end|>zz top zz to <|en\xc3\xa9 \xe6\xbc\xa2\xe5\xad\x97 "
      "\xf0\x9f\x98\x80\xf0\x9f\x98\x80 It's WE'LL      end  \t\n\r\n x<|end|"
      // e + acute + dot below + circumflex, Hangul jamo, a composition exclusion
      "e\xcc\x81\xcc\xa3\xcc\x82 \xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8\xe0\xa5\x98 \xcc\x81z";
  std::vector<std::size_t> starts;  // character starts, where the tool may cut
  for (std::size_t i = 1; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) starts.push_back(i);
  }
  // DeepSeek's shape: several Splits, each splitting the pieces of the one before.
  const json digits = {
      {"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}}, {"behavior", "Isolated"}, {"invert", false}};
  const json deepseek = {{"type", "Sequence"}, {"pretokenizers", json::array({digits, split, kByteLevel})}};
  const std::vector<json> pres = {kByteLevel, llama3, deepseek, llama3};
  for (std::size_t round = 0; round < pres.size(); ++round) {
    json j = Tokenizer(merges, pres[round], added);
    // The last round as Qwen's: NFC first, so cuts fall inside sequences it composes.
    if (round + 1 == pres.size()) j["normalizer"] = {{"type", "NFC"}};
    std::unique_ptr<HfTokenizer> tok = Load(j);
    const std::vector<int> whole = Encode(*tok, text);
    for (std::size_t cut : starts) EXPECT_EQ(EncodeInPieces(*tok, text, {cut}), whole) << "cut at " << cut;
    std::mt19937 rng(1);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<std::size_t> cuts;
      for (std::size_t s : starts) {
        if (rng() % 4 == 0) cuts.push_back(s);
      }
      EXPECT_EQ(EncodeInPieces(*tok, text, cuts), whole) << "trial " << trial;
    }
  }
}

TEST(HfTokenizerTest, CatastrophicPatternFailsWithItsPath) {
  // Exponential backtracking: PCRE2's match limit stops it, and the error names the
  // pattern.
  const json split = {
      {"type", "Split"}, {"pattern", {{"Regex", "(a|aa)+(?:b|\\s)"}}}, {"behavior", "Isolated"}, {"invert", false}};
  const json pre = {{"type", "Sequence"}, {"pretokenizers", json::array({split, kByteLevel})}};
  std::unique_ptr<HfTokenizer> tok = Load(Tokenizer({}, pre));
  HfEncoder encoder(tok.get());
  std::vector<int> ids;
  absl::StatusOr<std::size_t> done = encoder.Encode(std::string(60, 'a') + "x", true, &ids);
  ASSERT_FALSE(done.ok());
  EXPECT_NE(done.status().message().find("pre_tokenizer.pretokenizers[0].pattern.Regex"), std::string::npos)
      << done.status();
}

}  // namespace
}  // namespace trainyard::tokenize
