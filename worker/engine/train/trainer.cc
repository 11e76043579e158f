#include "worker/engine/train/trainer.h"

#include <ATen/record_function.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>

#include "common/flight/artifact_file.h"
#include "common/flight/stall_analysis.h"
#include "worker/engine/base/host_sync.h"
#include "worker/engine/base/torch_compat.h"
#include "worker/engine/checkpoint/checkpoint_loader.h"
#include "worker/engine/checkpoint/checkpoint_writer.h"
#include "worker/engine/checkpoint/train_state.h"
#include "worker/engine/diagnostics/tensor_memory.h"
#include "worker/engine/kernels/cpu/cpu_blas.h"
#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"
#include "worker/engine/parallel/parameter_sharding.h"
#include "worker/engine/train/checkpoint_events.h"
#include "worker/engine/train/step_report.h"
#include "worker/engine/train/trace_profiler.h"

namespace trainyard::engine {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

// Compile events go out as Event lines like every other event, from every rank.
class EventWriterSink final : public compile::CompileEventSink {
 public:
  explicit EventWriterSink(EventWriter& events) : events_(events) {}
  void OnCompileEvent(const v1::CompileEvent& event) override { events_.Compile(event); }

 private:
  EventWriter& events_;
};

// training.mixed_precision → the model's compute dtype (the weights stay fp32).
torch::ScalarType ComputeDtype(const TrainingConfig& t) {
  return t.mixed_precision == "bf16" ? torch::kBFloat16 : torch::kFloat;
}

compile::CompileOptions MakeCompileOptions(const CompileConfig& c) {
  compile::CompileOptions o;
  o.backend = compile::ParseCompileBackend(c.backend);
  o.recompile_limit = c.recompile_limit;
  o.on_side_effect = compile::ParseSideEffectPolicy(c.on_side_effect);
  return o;
}

}  // namespace

Trainer::Trainer(const EngineConfig& config, ProcessMesh& mesh, EventWriter& events, TrainerOptions options)
    : config_(config),
      mesh_(mesh),
      events_(events),
      options_(options),
      flops_(FlopsModel::FromConfig(config.model, config.training.seq_len)),
      schedule_(config.training.lr, config.training.warmup_steps, config.training.steps),
      peak_flops_(options.peak_flops, options.device, ComputeDtype(config.training)) {
  const ParallelContext& ctx = mesh.context();
  if (ctx.dp != config.parallelism.dp || ctx.tp != config.parallelism.tp || ctx.ep != config.parallelism.ep) {
    throw std::invalid_argument("Trainer: the process mesh was not built from this config's parallelism");
  }
  if (config.profiling.enable && options.artifacts_dir.empty()) {
    throw std::invalid_argument("Trainer: profiling.enable needs a folder for traces (TrainerOptions::artifacts_dir)");
  }
  if (mesh.world().device() != options.device) {
    throw std::invalid_argument("Trainer: the process mesh runs collectives on " + mesh.world().device().str() +
                                " but the trainer was asked for " + options.device.str());
  }
  dataset_ = MakeDataset(config.training, config.model);
  compile_sink_ = std::make_unique<EventWriterSink>(events);
  compile_ = std::make_unique<compile::CompileContext>(MakeCompileOptions(config.compile), *compile_sink_);
  watched_ = std::make_shared<compile::WatchedTensors>();
  regions_ = MakeCompiledRegionFactory(*compile_, watched_);
  ModelOptions model_options;
  model_options.regions = regions_.get();
  model_options.activation_checkpoint = config.activation_checkpoint.mode;
  model_options.plant_side_effect = config.compile.test_plant_side_effect;
  model_options.regions_granularity = config.compile.regions;
  model_options.compute_dtype = ComputeDtype(config.training);
  model_ = TransformerModel(config.model, config.training.seq_len, ctx, model_options);
  model_->to(options.device);
  *watched_ = compile::WatchModule(*model_);
  model_->InitWeights(config.training.seed);

  // Gradient classes (parameter_sharding.h): each local loss is the mean over its DP
  // rank's batch, so every class ends with a factor 1/dp. With dp_shard > 1 every
  // parameter is sharded over its FSDP group (fully_sharded.h): routed experts over the
  // expert FSDP group, the rest over the dense one.
  const bool fsdp = ctx.dp_shard > 1;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  std::vector<CollectiveGroup*> fsdp_groups;
  std::vector<torch::Tensor> dense, router, expert;
  std::vector<std::string> dense_names, router_names, expert_names;
  for (const auto& item : model_->named_parameters(/*recurse=*/true)) {
    const ShardKind kind = ShardKindOf(item.key());
    named.emplace_back(item.key(), item.value());
    fsdp_groups.push_back(kind == ShardKind::kExpert ? &mesh.expert_fsdp() : &mesh.fsdp());
    if (kind == ShardKind::kExpert) {
      expert.push_back(item.value());
      expert_names.push_back(item.key());
    } else if (kind == ShardKind::kTpPartial) {
      router.push_back(item.value());
      router_names.push_back(item.key());
    } else {
      dense.push_back(item.value());
      dense_names.push_back(item.key());
    }
  }
  if (fsdp) {
    fsdp_ = std::make_unique<FullyShardedParameters>(named, fsdp_groups, ComputeDtype(config.training),
                                                     FullyShardedParameters::PrefetchFromEnvironment());
    model_->set_before_unit([this](int unit) { fsdp_->WaitUnit(unit); });
  }
  GradientSink* dense_sink = fsdp_.get();
  GradientSink* expert_sink = fsdp && ctx.expert_shard > 1 ? fsdp_.get() : nullptr;
  for (size_t i = 0; i < named.size(); ++i) {
    const ShardKind kind = ShardKindOf(named[i].first);
    const bool sharded = fsdp_ && fsdp_->sharded(i);
    params_.push_back(sharded ? fsdp_->params()[i].shard : named[i].second);
    owned_.push_back(sharded ? OwnsFsdpShard(kind, ctx) && fsdp_->params()[i].rows > 0 : OwnsShard(kind, ctx));
  }
  const double inv_dp = 1.0 / ctx.dp;
  // Reduction during backward (gradient_synchronizer.h); off for A/B figures.
  const bool overlap = GradientSynchronizer::OverlapFromEnvironment();
  // With FSDP each class reduce-scatters over its FSDP group, then sums over the ranks
  // holding the same shard (process_mesh.h); otherwise one all-reduce per bucket.
  CollectiveGroup* fsdp_group = fsdp ? &mesh.fsdp() : nullptr;
  grad_syncs_.push_back(std::make_unique<GradientSynchronizer>(dense, dense_names, mesh.dp(), inv_dp, overlap,
                                                               dense_sink, fsdp_group, mesh.dp_replicate()));
  // Partial over TP and replicated over DP: one sum over the whole world.
  if (!router.empty()) {
    grad_syncs_.push_back(std::make_unique<GradientSynchronizer>(router, router_names, mesh.world(), inv_dp, overlap,
                                                                 dense_sink, fsdp_group, mesh.router_replicate()));
  }
  // Routed experts are reduced after backward: a rank whose experts got no token has no
  // expert graph, so its buckets would start at another point than other ranks' (NCCL
  // needs the same order across communicators on every rank).
  if (!expert.empty()) {
    grad_syncs_.push_back(std::make_unique<GradientSynchronizer>(
        expert, expert_names, mesh.expert_dp(), inv_dp, /*overlap=*/false, expert_sink,
        expert_sink != nullptr ? &mesh.expert_fsdp() : nullptr, mesh.expert_replicate()));
  }
  // The synchronizers took the full shapes and gradient accumulators: now the model's
  // sharded parameters can be emptied.
  if (fsdp_) fsdp_->ReleaseAll();
  optimizer_ = std::make_unique<AdamW>(params_, AdamWOptions{kBeta1, kBeta2, kEps, kWeightDecay});
  if (!config_.validation.dataset.empty()) {
    evaluator_ = std::make_unique<Evaluator>(config_, mesh, model_, events, options.device, options.flight);
  }
  if (ctx.rank == 0) {
    events.Log("info", "training data: " + DescribeDataset(*dataset_, GlobalBatch()));
    if (evaluator_) events.Log("info", "validation data: " + DescribeDataset(evaluator_->dataset(), GlobalBatch()));
  }
}

std::pair<double, double> Trainer::ClipGradients(double max_norm) {
  torch::NoGradGuard no_grad;
  auto sq = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat64).device(options_.device));
  double host_sq = 0;  // fused CPU path: one pass per gradient, accumulated in fp64
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!owned_[i]) continue;
    const torch::Tensor& g = params_[i].grad();
    if (fused::Applies(g)) {
      host_sq += fused::SumOfSquares(g);
    } else {
      sq += g.to(torch::kFloat64).pow(2).sum();
    }
  }
  if (host_sq != 0) sq += host_sq;
  mesh_.world().AllReduceSum(sq);
  double norm = 0;
  {
    HostRead read("gradient norm");
    norm = std::sqrt(sq.item<double>());
  }
  // Same rule as torch::nn::utils::clip_grad_norm_; the optimizer applies it.
  const double coef = max_norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
  return {norm, std::min(coef, 1.0)};
}

int64_t Trainer::GlobalBatch() const {
  const TrainingConfig& t = config_.training;
  return int64_t{t.batch_size} * mesh_.context().dp * t.grad_accum_steps;
}

void Trainer::Run() {
  const TrainingConfig& t = config_.training;
  const ParallelContext& ctx = mesh_.context();
  std::unique_ptr<CheckpointWriter> checkpoints = MakeCheckpointWriter(config_, ctx, options_, events_);
  const int interval = config_.checkpoint.interval;
  const std::vector<StateTensor> state = checkpoints ? TrainState() : std::vector<StateTensor>{};
  // Every step's tokens count, reported or not: a report carries those since the last.
  int64_t tokens_since_report = 0;
  const int64_t step_tokens = GlobalBatch() * t.seq_len;
  const bool rank_by_validation =
      evaluator_ && config_.checkpoint.keep_best > 0 && config_.checkpoint.best_metric == "val_loss";
  if (evaluator_ && start_step_ == 0) Evaluate(0);
  for (int step = static_cast<int>(start_step_) + 1; step <= t.steps; ++step) {
    v1::StepMetrics m;
    if (options_.flight != nullptr) options_.flight->SetStep(step);
    BeginStepProfile(step);
    try {
      m = Step(step);
    } catch (const c10::Error& e) {
      throw std::runtime_error("step " + std::to_string(step) + ": " + e.what_without_backtrace());
    }
    EndStepProfile(step);
    if (options_.flight != nullptr) options_.flight->MarkProgress();
    tokens_since_report += step_tokens;
    if (mesh_.world().rank() == 0 && (step % t.log_freq == 0 || step == t.steps)) {
      m.set_tokens(tokens_since_report);
      tokens_since_report = 0;
      events_.Step(m);
    }
    // Every rank read the same reduced flag, so all save this step or none do; an
    // interval step that was also asked for saves once, as requested.
    const bool save = checkpoints && (checkpoint_requested_ || (interval > 0 && step % interval == 0));
    // A checkpoint ranked by validation loss is scored by a validation of its own
    // weights: one runs at every saved step, also off validation.freq (every rank
    // agrees on `save`, so all run its collective).
    std::optional<v1::Validation> validated;
    if (evaluator_ && (evaluator_->DueAfter(step) || (save && rank_by_validation))) validated = Evaluate(step);
    if (step % config_.compile.summary_every == 0 || step == t.steps) compile_->Summary();
    if (checkpoints) {
      checkpoints->ThrowIfFailed();
      if (checkpoint_requested_ && mesh_.world().rank() == 0) {
        events_.Log("info", "checkpoint requested: saving after step " + std::to_string(step));
      }
      if (save) {
        CheckpointStep cs{step, optimizer_->steps(), GlobalBatch(), t.dataset, t.seed, checkpoint_requested_};
        if (config_.checkpoint.keep_best > 0) {
          if (rank_by_validation && validated) cs.metric = CheckpointMetric{"val_loss", validated->loss()};
          if (config_.checkpoint.best_metric == "train_loss") cs.metric = CheckpointMetric{"train_loss", m.loss()};
        }
        checkpoints->Save(cs, state);
      }
    } else if (checkpoint_requested_ && mesh_.world().rank() == 0) {
      events_.Log("warning", "checkpoint requested at step " + std::to_string(step) +
                                 " but this rank has no checkpoint directory (checkpoint.dir); none written");
    }
  }
  if (checkpoints) checkpoints->Wait();
}

void Trainer::BeginStepProfile(int step) {
  const spec::ProfilingSpec& p = config_.profiling;
  if (!p.enable || profile_window_start_ != 0) return;
  if (!flight::IsProfiledStep(step, p.freq, p.warmup, p.active)) return;
  TraceProfiler::Start(options_.device);
  profile_window_start_ = step;
}

void Trainer::EndStepProfile(int step) {
  if (profile_window_start_ == 0) return;
  const spec::ProfilingSpec& p = config_.profiling;
  if (step < config_.training.steps && flight::IsProfiledStep(step + 1, p.freq, p.warmup, p.active)) return;
  const int rank = mesh_.world().rank();
  const std::string name = TraceProfiler::TraceName(options_.attempt, rank, profile_window_start_);
  profile_window_start_ = 0;
  std::string trace;
  try {
    trace = TraceProfiler::Stop(rank, mesh_.world().world_size(), mesh_.world().backend_name(), options_.artifacts_dir);
  } catch (const std::exception& e) {
    events_.Log("warning", "profiler trace " + name + " not recorded: " + e.what());
    return;
  }
  absl::StatusOr<flight::WrittenArtifact> a = flight::WriteArtifactFile(options_.artifacts_dir, name, trace);
  if (!a.ok()) {
    // A trace is a diagnostic: losing one must not end the job.
    events_.Log("warning", "profiler trace " + name + " not written: " + std::string(a.status().message()));
    return;
  }
  events_.Artifact(ArtifactRefOf(*a, name, "trace"));
}

v1::StepMetrics Trainer::Step(int step) {
  const TrainingConfig& t = config_.training;
  const ModelConfig& mc = config_.model;
  peak_flops_.BeforeStep(step);
  tensor_memory::ResetPeak();  // the step's peak tensor bytes start from what it holds now
  const auto start = Clock::now();
  // A CPU step (eager or jit) runs every GEMM through the fused operators, which split
  // the work over the intra-op threads themselves: keep OpenBLAS at one thread for the
  // whole step rather than switching it down and back around each of ~150 multiplies.
  std::optional<cpu_blas::SerialScope> serial_blas;
  if (fused::Enabled() && options_.device.is_cpu()) serial_blas.emplace();

  // Each phase is a named range in profiles (OpProfile, the LibTorch profiler).
  const ParallelContext& ctx = mesh_.context();
  const int accum = t.grad_accum_steps;
  // Drop gradients instead of zero-filling them: the first backward then writes fresh
  // ones and skips a fill plus an add per parameter; later micro-batches add to them.
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
  // FSDP: every unit's all-gather starts now; forward waits for each just before it.
  if (fsdp_) fsdp_->StartGather();
  // Micro-batches of this DP rank's share of the global batch (dataset.h). Each micro
  // loss is scaled by 1/A so the gradients sum to those of the mean over all of them;
  // with A = 1 nothing is scaled, so the step is the one without accumulation.
  torch::Tensor loss_sum, counts_sum, dropped_sum;
  std::vector<int64_t> counts_shape;
  double data_ms = 0;
  if (options_.test_stall_at_step == step) {
    std::fprintf(stderr, "trainyard-rank %d: TEST HOOK: stalling forever before step %d's data\n", ctx.rank, step);
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  for (int micro = 0; micro < accum; ++micro) {
    const auto load_start = Clock::now();
    torch::Tensor batch;
    {
      RECORD_USER_SCOPE("trainyard::data");
      batch = LoadBatch(*dataset_, step - 1, ctx.dp_rank, ctx.dp, t.batch_size, accum, micro).to(options_.device);
    }
    auto inputs = batch.narrow(1, 0, t.seq_len);
    auto targets = batch.narrow(1, 1, t.seq_len);
    data_ms += Ms(load_start, Clock::now());

    ModelOutput out;
    {
      RECORD_USER_SCOPE("trainyard::forward");
      out = model_(inputs, targets);
    }
    torch::Tensor loss = accum == 1 ? out.loss : out.loss / static_cast<double>(accum);
    if (micro == accum - 1) {
      // The last backward of the step reduces each bucket as its gradients are final.
      for (auto& sync : grad_syncs_) sync->Arm();
    }
    {
      RECORD_USER_SCOPE("trainyard::backward");
      loss.backward();
    }
    torch::Tensor detached = loss.detach().to(torch::kFloat64).reshape({1});
    torch::Tensor counts = out.tokens_per_expert.to(torch::kFloat64).reshape({-1});
    loss_sum = micro == 0 ? detached : loss_sum + detached;
    counts_sum = micro == 0 ? counts : counts_sum + counts;
    torch::Tensor dropped = out.dropped_tokens.to(torch::kFloat64).reshape({1});
    dropped_sum = micro == 0 ? dropped : dropped_sum + dropped;
    if (micro == 0) counts_shape = out.tokens_per_expert.sizes().vec();
  }
  if (!fsdp_) {
    // A parameter the graph did not reach keeps a zero gradient, as zero_grad() left it
    // (under FSDP the synchronizers hand every shard its gradient, zeros included).
    torch::NoGradGuard no_grad;
    for (auto& p : params_) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    }
  }

  // Loss and routing counts travel together in one small all-reduce over the world.
  // Every TP rank holds its DP rank's loss, so the world sum over-counts by tp; the
  // counts cover disjoint token slices, so their world sum is the global count (over
  // every micro-batch), and so is that of the assignments the capacity dropped (after
  // the counts). fp64 keeps the counts exact.
  //
  // "Checkpoint now" rides in the same all-reduce: one more element, 1 when this rank
  // found (and removed) its request file. The world sum is > 0 exactly when some rank
  // was asked, so every rank decides the same at the same step with no collective of
  // its own; the per-step cost is one unlink.
  const bool asked = TakeCheckpointRequest();
  auto stats = torch::cat({loss_sum, counts_sum, dropped_sum, torch::full({1}, asked ? 1.0 : 0.0, loss_sum.options())});
  {
    RECORD_USER_SCOPE("trainyard::gradient_sync");
    // The gradient buckets first: the router's started on the world group during
    // backward, and a blocking world collective issued before a bucket one rank started
    // only now (a parameter its graph did not reach) would pair with another rank's
    // bucket.
    for (auto& sync : grad_syncs_) sync->Finish();
    if (fsdp_) fsdp_->ReleaseAll();  // what no bucket released (none, normally)
    mesh_.world().AllReduceSum(stats);
  }
  if (step == start_step_ + 1 && ctx.rank == 0) {
    events_.Log("info", DescribeGradientReduction(grad_syncs_, fsdp_.get(), ctx));
  }
  double grad_norm = 0, clip_scale = 1;
  {
    RECORD_USER_SCOPE("trainyard::grad_norm");
    std::tie(grad_norm, clip_scale) = ClipGradients(t.max_norm);
  }

  const double lr = schedule_.At(step);
  {
    RECORD_USER_SCOPE("trainyard::optimizer");
    optimizer_->Step(lr, clip_scale);
  }

  auto global_counts = stats.narrow(0, 1, stats.numel() - 3).reshape(counts_shape);
  if (mc.n_moe_layers() > 0) {
    RECORD_USER_SCOPE("trainyard::expert_bias");
    model_->UpdateExpertBiases(global_counts, mc.load_balance_coeff);
  }
  compat::Synchronize(options_.device);  // the step ends when its kernels have
  const auto end = Clock::now();
  // Before any re-probe below, whose operands are no part of the step.
  const int64_t peak_tensor_bytes = tensor_memory::PeakBytes();
  serial_blas.reset();  // a re-probe below times LibTorch's multiply on OpenBLAS's threads

  v1::StepMetrics m;
  m.set_step(step);
  m.set_epoch(EpochOfStep(*dataset_, step - 1, GlobalBatch()));
  // One copy to the host for the loss, the request flag and the dropped count.
  {
    HostRead read("step loss and checkpoint request");
    const auto head = torch::stack({stats[0], stats[stats.numel() - 1], stats[stats.numel() - 2]}).to(torch::kCPU);
    m.set_loss(head[0].item<double>() / ctx.world);
    checkpoint_requested_ = head[1].item<double>() > 0;
    m.set_dropped_tokens(std::llround(head[2].item<double>()));
  }
  if (checkpoint_requested_) requests_served_until_ = std::chrono::system_clock::now();
  m.set_grad_norm(grad_norm);
  m.set_lr(lr);
  const double step_s = std::max(1e-9, Ms(start, end) / 1000.0);
  const double rank_tokens = static_cast<double>(t.batch_size) * t.seq_len * accum;
  m.set_tokens_per_s(rank_tokens * ctx.dp / step_s);
  // Each rank does 1/world of the global work (TP/EP split the model, not tokens).
  m.set_model_tflops(flops_.flops_per_token * rank_tokens * ctx.dp / ctx.world / step_s / 1e12);
  m.set_mfu(peak_flops_.Mfu(step, m.model_tflops() * 1e12));
  m.set_step_ms(Ms(start, end));
  m.set_data_ms(data_ms);
  m.set_peak_rss_mb(PeakRssMb());
  m.set_peak_tensor_bytes(peak_tensor_bytes);
  SetExpertLoad(global_counts, m);
  return m;
}

}  // namespace trainyard::engine
