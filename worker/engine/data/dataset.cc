#include "worker/engine/data/dataset.h"

#include <stdexcept>

#include "worker/engine/data/synthetic_dataset.h"
#include "worker/engine/data/token_file_dataset.h"

namespace trainyard::engine {

std::unique_ptr<Dataset> MakeDataset(const TrainingConfig& t, const ModelConfig& m) {
  if (t.dataset == "synthetic") {
    return std::make_unique<SyntheticDataset>(t.seed, m.vocab_size, t.seq_len);
  }
  if (t.dataset == "tokens" || t.dataset == "text") {
    return std::make_unique<TokenFileDataset>(t.dataset, t.dataset_path, m.vocab_size, t.seq_len);
  }
  throw std::invalid_argument("dataset \"" + t.dataset + "\" is not supported by this engine");
}

torch::Tensor LoadBatch(const Dataset& dataset, int64_t step_index, int dp_rank, int dp,
                        int batch_size, int accum, int micro) {
  const int64_t width = dataset.seq_len() + 1;
  auto batch = torch::empty({batch_size, width}, torch::kInt64);
  int64_t* out = batch.data_ptr<int64_t>();
  const int64_t chunk = (step_index * dp + dp_rank) * accum + micro;
  const int64_t first = chunk * batch_size;
  for (int64_t j = 0; j < batch_size; ++j) {
    dataset.Sample((first + j) % dataset.num_samples(), out + j * width);
  }
  return batch;
}

}  // namespace trainyard::engine
