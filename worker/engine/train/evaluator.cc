#include "worker/engine/train/evaluator.h"

#include <ATen/record_function.h>

#include <chrono>

#include "worker/engine/base/host_sync.h"
#include "worker/engine/base/torch_compat.h"

namespace trainyard::engine {

Evaluator::Evaluator(const EngineConfig& config, ProcessMesh& mesh, TransformerModel& model, EventWriter& events,
                     c10::Device device, flight::FlightRing* flight)
    : config_(config), mesh_(mesh), model_(model), events_(events), device_(device), flight_(flight) {
  dataset_ = MakeValidationDataset(config.validation, config.training, config.model);
}

bool Evaluator::DueAfter(int64_t step) const {
  return step == 0 || step % config_.validation.freq == 0 || step == config_.training.steps;
}

v1::Validation Evaluator::Run(int64_t step) {
  RECORD_USER_SCOPE("trainyard::validation");
  const auto start = std::chrono::steady_clock::now();
  const ParallelContext& ctx = mesh_.context();
  const int batch = config_.training.batch_size;
  const int seq = config_.training.seq_len;
  const int steps = config_.validation.steps;
  // fp64 sum of the per-batch mean losses of this rank (each TP rank of a DP rank holds
  // the same loss: the world sum over-counts by tp, divided out below).
  auto sum = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  for (int b = 0; b < steps; ++b) {
    torch::Tensor tokens = LoadEvalBatch(*dataset_, b, ctx.dp_rank, ctx.dp, batch).to(device_);
    ModelOutput out = model_(tokens.narrow(1, 0, seq), tokens.narrow(1, 1, seq));
    sum += out.loss.detach().to(torch::kFloat64).reshape({1});
    if (flight_ != nullptr) flight_->MarkProgress();
  }
  mesh_.world().AllReduceSum(sum);
  compat::Synchronize(device_);
  v1::Validation v;
  v.set_step(step);
  HostRead read("validation loss");
  v.set_loss(sum.item<double>() / (static_cast<double>(steps) * ctx.world));
  v.set_tokens(int64_t{steps} * batch * seq * ctx.dp);
  v.set_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  if (ctx.rank == 0) events_.Validation(v);
  return v;
}

}  // namespace trainyard::engine
