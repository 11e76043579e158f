#include "worker/engine/data/corpus_dataset.h"

#include <stdexcept>

namespace trainyard::engine {
namespace {

// The job's input is wrong (a retry cannot help): InputError, exit 87. An I/O error
// or a file that changed under the rank (UNAVAILABLE, DATA_LOSS) may pass on another
// attempt or another worker: a plain error, exit 1, restarted as configured.
[[noreturn]] void Throw(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kOutOfRange:
      throw InputError(std::string(s.message()));
    default:
      throw std::runtime_error(std::string(s.message()));
  }
}

}  // namespace

CorpusDataset::CorpusDataset(const CorpusDatasetOptions& o) : kind_(o.kind), seq_len_(o.seq_len), seed_(o.seed) {
  if (o.seq_len < 1) throw std::invalid_argument("CorpusDataset: seq_len must be positive");
  data::CorpusOptions c;
  c.kind = o.kind;
  c.path_list = o.path_list;
  c.vocab_size = o.vocab_size;
  c.key = o.key;
  c.max_open_files = o.max_open_files;
  auto corpus = data::TokenCorpus::Open(c);
  if (!corpus.ok()) Throw(corpus.status());
  corpus_ = std::move(*corpus);
  const int64_t total = corpus_->total_tokens();
  const int64_t samples = (total - 1) / seq_len_;
  if (samples < 1) {
    throw InputError(o.key + ": the corpus holds " + std::to_string(total) +
                     " tokens, fewer than one sample of training.seq_len+1 = " + std::to_string(seq_len_ + 1));
  }
  order_ = std::make_unique<data::SampleOrder>(samples, o.shuffle, o.seed);
}

void CorpusDataset::Sample(int64_t index, int64_t* out) const {
  const absl::Status s = corpus_->Read(index * seq_len_, seq_len_ + 1, out);
  if (!s.ok()) Throw(s);
}

std::string CorpusDataset::Describe() const {
  std::string order = order_->shuffled() ? "shuffled per epoch (seed " + std::to_string(seed_) + ")" : "in file order";
  return kind_ + " from " + corpus_->key() + ", " + order + ": " + corpus_->Describe();
}

}  // namespace trainyard::engine
