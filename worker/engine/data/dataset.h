// Token datasets and the deterministic batch order shared by every DP layout.
//
// A dataset is a list of samples of seq_len+1 tokens (inputs plus shifted targets).
// The global batch of step k is dp·A chunks of B samples (A = grad_accum_steps
// micro-batches per DP rank). Micro-batch m on DP rank r is chunk c = (k·dp + r)·A + m
// and holds samples c·B … c·B + B − 1, wrapping modulo the number of samples, so the
// global batch k is the same samples whatever dp and A are, as long as dp·A is: (dp=2,
// A=1) and (dp=1, A=2) train on the same chunks in each step. Implementations are immutable after construction and safe to read from any
// thread.
#pragma once

#include <cstdint>
#include <memory>

#include <torch/torch.h>

#include "worker/engine/config/engine_config.h"

namespace trainyard::engine {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t num_samples() const = 0;
  virtual int64_t seq_len() const = 0;
  // Writes seq_len()+1 tokens of sample `index` (0 <= index < num_samples()) to `out`.
  virtual void Sample(int64_t index, int64_t* out) const = 0;
};

// Builds the dataset named by training.dataset ("synthetic", "tokens", "text").
// Throws std::invalid_argument naming the dataset and path on any problem.
std::unique_ptr<Dataset> MakeDataset(const TrainingConfig& training, const ModelConfig& model);

// [batch_size, seq_len+1] int64: micro-batch `micro` (0 <= micro < accum) of step
// `step_index` (0-based) on `dp_rank`.
torch::Tensor LoadBatch(const Dataset& dataset, int64_t step_index, int dp_rank, int dp,
                        int batch_size, int accum = 1, int micro = 0);

}  // namespace trainyard::engine
