// Runs the training loop for one rank of the dp × tp mesh (with EP carved from it):
// training.grad_accum_steps micro-batches (each: batch → forward → loss/A → backward,
// gradients accumulating) → gradient reduction per gradient class → global clip → AdamW (lr schedule) → expert-bias
// update, emitting step metrics on rank 0. Every rank runs the same collectives in the same order. TP ranks of one DP
// rank read the same batch. On CUDA the weights are drawn on the host exactly as on CPU, then moved; step times include
// a device synchronize so they cover the GPU work. Not thread-safe; owned by main.
//
// Optimizer choice: AdamW, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1 on every
// parameter (as torchtitan does); max_norm <= 0 turns clipping off (norm still reported).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/flight/flight_ring.h"
#include "worker/engine/checkpoint/train_state.h"
#include "worker/engine/compile/compile_context.h"
#include "worker/engine/compile/region/side_effect_probe.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/data/dataset.h"
#include "worker/engine/io/state_dict_io.h"
#include "worker/engine/model/regions/region_factory.h"
#include "worker/engine/model/transformer_model.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/optim/lr_schedule.h"
#include "worker/engine/parallel/fully_sharded.h"
#include "worker/engine/parallel/gradient_synchronizer.h"
#include "worker/engine/parallel/mesh/process_mesh.h"
#include "worker/engine/train/evaluator.h"
#include "worker/engine/train/event_writer.h"
#include "worker/engine/train/flops_model.h"
#include "worker/engine/train/step_report.h"

namespace trainyard::engine {

struct TrainerOptions {
  int threads = 1;
  double peak_flops = 0;  // FLOP/s of this rank for MFU (step_report.h PeakFlops); 0 = unknown
  // Where the model, batches and collective buffers live; must be the mesh's device
  // (DevicePlacement::ForLocalRank).
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  // Checkpoints (every checkpoint.interval steps, and on request) go under this root
  // (trainyard-rank --checkpoint-dir, default checkpoint.dir); "" writes none.
  std::string checkpoint_dir;
  // "Checkpoint now" (docs/checkpoints.md): the file the worker creates to ask for a
  // checkpoint (trainyard-rank: RUN_DIR/checkpoint.request). Each step removes it if it
  // is there, and the ranks agree through the step's stats all-reduce; "": never asked.
  std::string checkpoint_request_path;
  int attempt = 1;  // in checkpoint directory names and metadata
  // Test hook (TRAINYARD_TEST_PAUSE_CHECKPOINT_AT_STEP): the writer of this step's
  // checkpoint stops mid-file and sleeps until killed; 0: off.
  int64_t pause_checkpoint_at_step = 0;
  // Test hook (TRAINYARD_TEST_HANG_REQUESTED_CHECKPOINT): the writer of every requested
  // checkpoint stops mid-file and sleeps until killed.
  bool hang_requested_checkpoint = false;
  // Test hook (TRAINYARD_TEST_KILL_IN_PRUNE): rank 0 kills itself (SIGKILL) in its first
  // checkpoint removal, after the rename and the manifest's removal.
  bool kill_in_prune = false;
  // This rank's flight ring (trainyard-rank --run-dir); the trainer marks each step and
  // its progress in it for the watchdog. Null: none.
  flight::FlightRing* flight = nullptr;
  // Where profiler traces go (RUN_DIR/artifacts); "" with profiling.enable: the rank
  // refuses to start (trainyard-rank always sets it).
  std::string artifacts_dir;
  // Test hook (TRAINYARD_TEST_STALL_RANK / _AT_STEP, attempt 1 only): this rank sleeps
  // forever before step N's first data fetch, outside any collective; 0: off.
  int64_t test_stall_at_step = 0;
};

class Trainer {
 public:
  static constexpr double kBeta1 = 0.9;
  static constexpr double kBeta2 = 0.95;
  static constexpr double kWeightDecay = 0.1;
  static constexpr double kEps = 1e-8;

  // `mesh` must have been built from config.parallelism and outlive the Trainer.
  Trainer(const EngineConfig& config, ProcessMesh& mesh, EventWriter& events, TrainerOptions options);

  // Restores a checkpoint directory written under any layout (checkpoint_loader.h):
  // weights, AdamW state, expert biases, RNG; Run then continues at the step after
  // it (none when it holds training.steps already: a restart after the last
  // checkpoint then ends at once). Returns that checkpoint's step. Throws naming the
  // path and the problem.
  int64_t Resume(const std::string& checkpoint_dir);

  // Starting weights (checkpoint_loader.h LoadInitialWeights), into the shards under
  // FSDP. Returns what it loaded, for a log line; throws as LoadInitialWeights.
  std::string LoadWeights(const std::string& path);
  // Collective: the full model (state_dict_io.h GatherFullState), gathering FSDP's
  // shards first and emptying them again after.
  NamedTensors FullState();
  // fp32 parameter, gradient and AdamW moment bytes this rank keeps between steps (the
  // parameters it updates: its shards under FSDP).
  int64_t PersistentStateBytes() const;

  // Runs the steps after the resumed one (or 1) up to training.steps, checkpointing
  // every checkpoint.interval steps and after every step at which any rank found its
  // checkpoint request (once per step: CheckpointSaved.requested then); before
  // returning waits for the last checkpoint write. Throws on any failure, with the step
  // (or the checkpoint path) in the message.
  void Run();

  // One optimizer step (1-based). Returns the metrics that rank 0 reports. Removes this
  // rank's checkpoint request file, if any, before the step's stats all-reduce; after
  // it, checkpoint_requested() says whether any rank of the world had one.
  v1::StepMetrics Step(int step);
  bool checkpoint_requested() const { return checkpoint_requested_; }
  // Takes this rank's request file, if there is one (TrainerOptions::checkpoint_request_path);
  // false for none, and for one written before the last requested save the world
  // agreed on, which answered it.
  bool TakeCheckpointRequest();

  TransformerModel& model() { return model_; }
  ProcessMesh& mesh() { return mesh_; }
  const FlopsModel& flops() const { return flops_; }
  compile::CompileContext& compile_context() { return *compile_; }

 private:
  EngineConfig config_;
  ProcessMesh& mesh_;
  EventWriter& events_;
  TrainerOptions options_;
  int64_t start_step_ = 0;             // the last step done before Run (a resumed checkpoint's)
  bool checkpoint_requested_ = false;  // the last Step's world-wide request flag
  // When the world last agreed to save on request: a request file older than that asked
  // for that save (another worker's rank carried the same request a step earlier).
  std::chrono::system_clock::time_point requests_served_until_{};
  FlopsModel flops_;
  LrSchedule schedule_;
  PeakFlops peak_flops_;  // starts at options_.peak_flops; re-measured when a step beats it
  std::unique_ptr<Dataset> dataset_;
  // The compile layer (declared before the model, which calls into it).
  std::unique_ptr<compile::CompileEventSink> compile_sink_;
  std::unique_ptr<compile::CompileContext> compile_;
  std::shared_ptr<compile::WatchedTensors> watched_;
  std::unique_ptr<RegionFactory> regions_;
  TransformerModel model_{nullptr};
  std::vector<torch::Tensor> params_;
  std::unique_ptr<FullyShardedParameters> fsdp_;  // null unless parallelism.dp_shard > 1
  std::unique_ptr<AdamW> optimizer_;
  // What the optimizer updates, in model order: the model's parameters, or under FSDP
  // this rank's shards (and the parameters FSDP leaves whole).
  std::vector<bool> owned_;  // per params_: counted in the grad norm on this rank
  std::vector<std::unique_ptr<GradientSynchronizer>> grad_syncs_;
  std::unique_ptr<Evaluator> evaluator_;  // null without [validation]

  // Global L2 norm over every shard (each element once) and the clip coefficient of
  // torch::nn::utils::clip_grad_norm_ (at most 1), which the optimizer step applies.
  // Returns {pre-clip norm, coefficient}.
  std::pair<double, double> ClipGradients(double max_norm);
  // Profiling windows (profiling.*): starts the trace profiler before a window's first
  // step; after its last, writes trace-aA-rR-sSSSSSSSS.json under artifacts_dir and
  // emits an ArtifactRef.
  void BeginStepProfile(int step);
  void EndStepProfile(int step);
  int64_t profile_window_start_ = 0;  // first step of the running window; 0 none
  int64_t GlobalBatch() const;        // samples per optimizer step
  // The checkpoint's tensors (train_state.h): CollectTrainState, or its FSDP form.
  std::vector<StateTensor> TrainState();
  // The evaluator's pass after `step`; under FSDP it gathers and then empties again.
  v1::Validation Evaluate(int64_t step);
};

}  // namespace trainyard::engine
