// Token datasets and the deterministic batch order shared by every DP layout.
//
// A dataset is a list of N samples of seq_len+1 tokens (inputs plus shifted targets).
// The global batch of step k is dp·A chunks of B samples (A = grad_accum_steps
// micro-batches per DP rank). Micro-batch m on DP rank r is chunk c = (k·dp + r)·A + m
// and holds the global sample numbers g = c·B … c·B + B − 1, so the global batch k is
// the same samples whatever dp and A are, as long as dp·A is: (dp=2, A=1) and (dp=1,
// A=2) train on the same chunks in each step. A global sample number is mapped to a
// sample by the dataset's training order (TrainingSample): g mod N, or with
// training.shuffle a seeded permutation per epoch (common/data/sample_order.h). The
// order is a pure function of (seed, N, g), so resuming at step k reads exactly what
// the uninterrupted run would have.
//
// Datasets: "synthetic" (synthetic_dataset.h; no epochs) and the file corpora "tokens"
// and "text" (corpus_dataset.h; docs/data.md). Every problem with a dataset — a missing
// or malformed file, a token >= model.vocab_size met while reading — throws InputError
// (worker/engine/base/input_error.h) naming the dataset key, the file and the byte
// offset; the rank reports that as a permanent failure of the job's inputs.
//
// Implementations are immutable after construction and safe to read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "worker/engine/base/input_error.h"
#include "worker/engine/config/engine_config.h"

namespace trainyard::engine {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t num_samples() const = 0;
  virtual int64_t seq_len() const = 0;
  // Writes seq_len()+1 tokens of sample `index` (0 <= index < num_samples()) to `out`.
  // Throws InputError when the data cannot be read or holds an invalid token.
  virtual void Sample(int64_t index, int64_t* out) const = 0;
  // The sample read at global sample number g >= 0 of training.
  virtual int64_t TrainingSample(int64_t g) const { return g % num_samples(); }
  // The 1-based epoch of global sample number g; 0 for a dataset without epochs.
  virtual int64_t EpochOf(int64_t g) const { return 0; }
  // What the dataset reads, in one line (files, formats, totals).
  virtual std::string Describe() const = 0;
};

// Builds the dataset named by training.dataset ("synthetic", "tokens", "text") from
// training.dataset_path, in training order (training.shuffle, training.seed). Throws
// InputError naming the key, the file and the offset on any problem.
std::unique_ptr<Dataset> MakeDataset(const TrainingConfig& training, const ModelConfig& model);

// The held-out dataset of [validation]: validation.dataset and validation.dataset_path
// (errors name those keys), samples of training.seq_len, never shuffled. nullptr when
// validation.dataset is "" (off). A "synthetic" validation set is the training chain
// (same seed) at sample indices from 2^39 on, which no run reaches in training.
std::unique_ptr<Dataset> MakeValidationDataset(const spec::ValidationSpec& validation,
                                               const TrainingConfig& training, const ModelConfig& model);

// [batch_size, seq_len+1] int64: micro-batch `micro` (0 <= micro < accum) of step
// `step_index` (0-based) on `dp_rank`, in the training order.
torch::Tensor LoadBatch(const Dataset& dataset, int64_t step_index, int dp_rank, int dp,
                        int batch_size, int accum = 1, int micro = 0);

// [batch_size, seq_len+1] int64: evaluation batch `batch_index` of `dp_rank`, samples
// ((batch_index·dp + dp_rank)·batch_size + j) mod N in file order (never shuffled), so
// every evaluation reads the same held-out samples.
torch::Tensor LoadEvalBatch(const Dataset& dataset, int64_t batch_index, int dp_rank, int dp, int batch_size);

// The 1-based epoch of the last sample of step `step_index` (0-based) with
// `global_batch` samples per step; 0 for a dataset without epochs (synthetic).
int64_t EpochOfStep(const Dataset& dataset, int64_t step_index, int64_t global_batch);

// The start-up line: Describe(), the samples, and how many steps of `global_batch`
// samples one epoch lasts.
std::string DescribeDataset(const Dataset& dataset, int64_t global_batch);

}  // namespace trainyard::engine
