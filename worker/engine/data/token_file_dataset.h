// File-backed datasets, read fully into memory at start-up.
//
//   dataset = "tokens": a flat little-endian array of token ids. The element width
//     comes from the dataset_path suffix: `.u16` (uint16) or `.u32` (uint32); any other
//     suffix is rejected, so a file is never silently read with the wrong width.
//   dataset = "text": byte-level; every byte of the file is one token (needs
//     vocab_size >= 256).
//
// Sample i is tokens [i·T, i·T + T] (T+1 tokens, neighbouring samples share one), so
// there are floor((n − 1) / T) samples. Every id is checked against vocab_size once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/engine/data/dataset.h"

namespace trainyard::engine {

class TokenFileDataset : public Dataset {
 public:
  // Throws std::invalid_argument (with the dataset kind and path) on a bad file.
  TokenFileDataset(const std::string& kind, const std::string& path, int64_t vocab_size,
                   int64_t seq_len);

  int64_t num_samples() const override { return num_samples_; }
  int64_t seq_len() const override { return seq_len_; }
  void Sample(int64_t index, int64_t* out) const override;

 private:
  int64_t seq_len_;
  int64_t num_samples_ = 0;
  std::vector<std::uint32_t> tokens_;
};

}  // namespace trainyard::engine
