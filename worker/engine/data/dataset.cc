#include "worker/engine/data/dataset.h"

#include <cstdio>
#include <stdexcept>

#include "worker/engine/data/corpus_dataset.h"
#include "worker/engine/data/synthetic_dataset.h"

namespace trainyard::engine {
namespace {

constexpr int64_t kValidationFirstIndex = int64_t{1} << 39;

std::unique_ptr<Dataset> Make(const std::string& section, const std::string& kind, const std::string& path,
                              const ModelConfig& m, const TrainingConfig& t, bool shuffle, int64_t synthetic_first) {
  if (kind == "synthetic") {
    return std::make_unique<SyntheticDataset>(t.seed, m.vocab_size, t.seq_len, synthetic_first);
  }
  if (kind == "tokens" || kind == "text") {
    CorpusDatasetOptions o;
    o.kind = kind;
    o.path_list = path;
    o.key = section + ".dataset_path";
    o.vocab_size = m.vocab_size;
    o.seq_len = t.seq_len;
    o.shuffle = shuffle;
    o.seed = t.seed;
    return std::make_unique<CorpusDataset>(o);
  }
  throw InputError(section + ".dataset: \"" + kind + "\" is not supported by this engine (synthetic, tokens, text)");
}

}  // namespace

std::unique_ptr<Dataset> MakeDataset(const TrainingConfig& t, const ModelConfig& m) {
  return Make("training", t.dataset, t.dataset_path, m, t, t.shuffle, 0);
}

std::unique_ptr<Dataset> MakeValidationDataset(const spec::ValidationSpec& v, const TrainingConfig& t,
                                               const ModelConfig& m) {
  if (v.dataset.empty()) return nullptr;
  return Make("validation", v.dataset, v.dataset_path, m, t, /*shuffle=*/false, kValidationFirstIndex);
}

torch::Tensor LoadBatch(const Dataset& dataset, int64_t step_index, int dp_rank, int dp,
                        int batch_size, int accum, int micro) {
  const int64_t width = dataset.seq_len() + 1;
  auto batch = torch::empty({batch_size, width}, torch::kInt64);
  int64_t* out = batch.data_ptr<int64_t>();
  const int64_t chunk = (step_index * dp + dp_rank) * accum + micro;
  const int64_t first = chunk * batch_size;
  for (int64_t j = 0; j < batch_size; ++j) {
    dataset.Sample(dataset.TrainingSample(first + j), out + j * width);
  }
  return batch;
}

torch::Tensor LoadEvalBatch(const Dataset& dataset, int64_t batch_index, int dp_rank, int dp, int batch_size) {
  const int64_t width = dataset.seq_len() + 1;
  auto batch = torch::empty({batch_size, width}, torch::kInt64);
  int64_t* out = batch.data_ptr<int64_t>();
  const int64_t first = (batch_index * dp + dp_rank) * batch_size;
  for (int64_t j = 0; j < batch_size; ++j) {
    dataset.Sample((first + j) % dataset.num_samples(), out + j * width);
  }
  return batch;
}

int64_t EpochOfStep(const Dataset& dataset, int64_t step_index, int64_t global_batch) {
  return dataset.EpochOf((step_index + 1) * global_batch - 1);
}

std::string DescribeDataset(const Dataset& dataset, int64_t global_batch) {
  std::string s = dataset.Describe();
  const int64_t n = dataset.num_samples();
  if (dataset.EpochOf(0) == 0) {
    return s + "; samples of seq_len+1 = " + std::to_string(dataset.seq_len() + 1) + " tokens, no epochs";
  }
  char steps[64];
  std::snprintf(steps, sizeof(steps), "%.6g", static_cast<double>(n) / static_cast<double>(global_batch));
  return s + "; " + std::to_string(n) + " samples of seq_len+1 = " + std::to_string(dataset.seq_len() + 1) +
         " tokens; 1 epoch = " + steps + " steps of " + std::to_string(global_batch) + " samples";
}

}  // namespace trainyard::engine
