// `tokens` and `text`: samples packed causally over a file corpus (common/data/), read
// on demand with pread and never held in memory.
//
// The corpus is the concatenation of every file's token stream (documents included, in
// the order of dataset_path, docs/data.md). Sample i is tokens [i·T, i·T + T] of that
// stream (T = seq_len; neighbouring samples share one token), as Megatron's GPTDataset
// and torchtitan pack documents: a sample may span documents and files, and there are
// N = floor((total − 1) / T) samples. The training order is a SampleOrder over N
// (identity, or a seeded permutation per epoch with `shuffle`).
//
// Construction validates the files (corpus_paths.h, token_corpus.h); Sample checks each
// token against vocab_size as it reads it. Both throw InputError whose message starts
// with the dataset_path key. Immutable; Sample is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/data/sample_order.h"
#include "common/data/token_corpus.h"
#include "worker/engine/data/dataset.h"

namespace trainyard::engine {

struct CorpusDatasetOptions {
  std::string kind;       // "tokens" | "text"
  std::string path_list;  // the dataset_path value
  std::string key;        // "training.dataset_path" or "validation.dataset_path"
  int64_t vocab_size = 0;
  int64_t seq_len = 0;
  bool shuffle = false;
  std::uint64_t seed = 0;
  std::size_t max_open_files = 256;  // data::CorpusOptions
};

class CorpusDataset : public Dataset {
 public:
  explicit CorpusDataset(const CorpusDatasetOptions& options);

  int64_t num_samples() const override { return order_->num_samples(); }
  int64_t seq_len() const override { return seq_len_; }
  void Sample(int64_t index, int64_t* out) const override;
  int64_t TrainingSample(int64_t g) const override { return order_->SampleOf(g); }
  int64_t EpochOf(int64_t g) const override { return order_->EpochOf(g); }
  std::string Describe() const override;

  const data::TokenCorpus& corpus() const { return *corpus_; }

 private:
  std::string kind_;
  int64_t seq_len_;
  std::uint64_t seed_;
  std::unique_ptr<data::TokenCorpus> corpus_;
  std::unique_ptr<data::SampleOrder> order_;
};

}  // namespace trainyard::engine
