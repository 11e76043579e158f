#include "worker/engine/data/token_file_dataset.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace trainyard::engine {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TokenFileDataset::TokenFileDataset(const std::string& kind, const std::string& path,
                                   int64_t vocab_size, int64_t seq_len)
    : seq_len_(seq_len) {
  const std::string where = "dataset \"" + kind + "\" (" + path + "): ";
  int width = 0;
  if (kind == "text") {
    width = 1;
    if (vocab_size < 256) {
      throw std::invalid_argument(where + "byte-level text needs model.vocab_size >= 256, got " +
                                  std::to_string(vocab_size));
    }
  } else if (EndsWith(path, ".u16")) {
    width = 2;
  } else if (EndsWith(path, ".u32")) {
    width = 4;
  } else {
    throw std::invalid_argument(where + "token files must end in .u16 or .u32 (element width)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(where + "cannot open file");
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() % width != 0) {
    throw std::invalid_argument(where + "size " + std::to_string(bytes.size()) +
                                " is not a multiple of " + std::to_string(width) + " bytes");
  }
  const size_t n = bytes.size() / width;
  tokens_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    std::uint32_t v = 0;
    for (int b = 0; b < width; ++b) v |= static_cast<std::uint32_t>(bytes[i * width + b]) << (8 * b);
    if (v >= static_cast<std::uint64_t>(vocab_size)) {
      throw std::invalid_argument(where + "token " + std::to_string(v) + " at index " +
                                  std::to_string(i) + " is >= model.vocab_size " +
                                  std::to_string(vocab_size));
    }
    tokens_[i] = v;
  }
  num_samples_ = n > 0 ? static_cast<int64_t>(n - 1) / seq_len : 0;
  if (num_samples_ == 0) {
    throw std::invalid_argument(where + "has " + std::to_string(n) +
                                " tokens, fewer than one sample of seq_len+1=" +
                                std::to_string(seq_len + 1));
  }
}

void TokenFileDataset::Sample(int64_t index, int64_t* out) const {
  const std::uint32_t* src = tokens_.data() + index * seq_len_;
  for (int64_t t = 0; t <= seq_len_; ++t) out[t] = src[t];
}

}  // namespace trainyard::engine
