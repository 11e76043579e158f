#include "worker/engine/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

namespace trainyard::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double PeakRssMb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

}  // namespace

Trainer::Trainer(const EngineConfig& config, CollectiveGroup& group, EventWriter& events,
                 TrainerOptions options)
    : config_(config),
      group_(group),
      events_(events),
      options_(options),
      flops_(FlopsModel::FromConfig(config.model, config.training.seq_len)),
      schedule_(config.training.lr, config.training.warmup_steps, config.training.steps) {
  if (group.world_size() != config.parallelism.world_size()) {
    throw std::invalid_argument("world size " + std::to_string(group.world_size()) +
                                " does not match parallelism.dp*tp*ep = " +
                                std::to_string(config.parallelism.world_size()));
  }
  dataset_ = MakeDataset(config.training, config.model);
  model_ = TransformerModel(config.model, config.training.seq_len);
  model_->InitWeights(config.training.seed);
  params_ = model_->parameters();
  optimizer_ = std::make_unique<torch::optim::AdamW>(
      params_, torch::optim::AdamWOptions(config.training.lr)
                   .betas({kBeta1, kBeta2})
                   .eps(kEps)
                   .weight_decay(kWeightDecay));
  grad_sync_ = std::make_unique<GradientSynchronizer>(params_, group_);
}

void Trainer::Run() {
  const TrainingConfig& t = config_.training;
  for (int step = 1; step <= t.steps; ++step) {
    StepMetrics m;
    try {
      m = Step(step);
    } catch (const c10::Error& e) {
      throw std::runtime_error("step " + std::to_string(step) + ": " + e.what_without_backtrace());
    }
    if (group_.rank() == 0 && (step % t.log_freq == 0 || step == t.steps)) events_.Step(m);
  }
}

StepMetrics Trainer::Step(int step) {
  const TrainingConfig& t = config_.training;
  const ModelConfig& mc = config_.model;
  const auto start = Clock::now();

  auto batch = LoadBatch(*dataset_, step - 1, group_.rank(), config_.parallelism.dp, t.batch_size);
  auto inputs = batch.narrow(1, 0, t.seq_len);
  auto targets = batch.narrow(1, 1, t.seq_len);
  const auto data_done = Clock::now();

  optimizer_->zero_grad();
  ModelOutput out = model_(inputs);
  auto loss = torch::nn::functional::cross_entropy(out.logits.reshape({-1, mc.vocab_size}),
                                                   targets.reshape({-1}));
  loss.backward();

  // Loss and routing counts travel together in one small all-reduce. fp64 keeps the
  // counts exact.
  auto stats = torch::cat({loss.detach().to(torch::kFloat64).reshape({1}),
                           out.tokens_per_expert.to(torch::kFloat64).reshape({-1})});
  group_.AllReduceSum(stats);
  grad_sync_->AverageGradients();

  double grad_norm = 0;
  if (t.max_norm > 0) {
    grad_norm = torch::nn::utils::clip_grad_norm_(params_, t.max_norm);
  } else {
    torch::NoGradGuard no_grad;
    double sq = 0;
    for (const auto& p : params_) sq += p.grad().pow(2).sum().item<double>();
    grad_norm = std::sqrt(sq);
  }

  const double lr = schedule_.At(step);
  for (auto& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  optimizer_->step();

  auto global_counts = stats.narrow(0, 1, stats.numel() - 1).reshape(out.tokens_per_expert.sizes());
  if (mc.n_moe_layers() > 0) model_->UpdateExpertBiases(global_counts, mc.load_balance_coeff);
  const auto end = Clock::now();

  StepMetrics m;
  m.step = step;
  m.loss = stats[0].item<double>() / group_.world_size();
  m.grad_norm = grad_norm;
  m.lr = lr;
  const double step_s = std::max(1e-9, Ms(start, end) / 1000.0);
  const double rank_tokens = static_cast<double>(t.batch_size) * t.seq_len;
  m.tokens_per_s = rank_tokens * group_.world_size() / step_s;
  m.model_tflops = flops_.flops_per_token * rank_tokens / step_s / 1e12;
  m.mfu = options_.peak_flops > 0 ? m.model_tflops * 1e12 / options_.peak_flops : 0.0;
  m.step_ms = Ms(start, end);
  m.data_ms = Ms(start, data_done);
  m.peak_rss_mb = PeakRssMb();
  if (global_counts.numel() > 0) {
    auto load = global_counts.sum(0).round().to(torch::kInt64).contiguous();
    m.expert_load.assign(load.data_ptr<int64_t>(), load.data_ptr<int64_t>() + load.numel());
    const double mean = load.to(torch::kFloat64).mean().item<double>();
    const double max = load.max().item<int64_t>();
    m.imbalance = mean > 0 ? max / mean : 0.0;
  }
  return m;
}

}  // namespace trainyard::engine
