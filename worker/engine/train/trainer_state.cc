// The Trainer's state beyond the step: checkpoint tensors and resume, starting weights,
// the full-state gather, the evaluator's pass and the checkpoint request file. Each
// knows FSDP: the model's sharded parameters are empty between steps (fully_sharded.h),
// so whatever reads or writes them whole gathers first and empties them after.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "worker/engine/checkpoint/checkpoint_loader.h"
#include "worker/engine/checkpoint/train_state.h"
#include "worker/engine/train/trainer.h"

namespace trainyard::engine {

std::vector<StateTensor> Trainer::TrainState() {
  return fsdp_ ? CollectShardedTrainState(*model_, *optimizer_, *fsdp_) : CollectTrainState(*model_, *optimizer_);
}

int64_t Trainer::Resume(const std::string& checkpoint_dir) {
  const TrainingConfig& t = config_.training;
  const CheckpointManifest m =
      LoadCheckpoint(checkpoint_dir, TrainState(), mesh_.world().rank(), {GlobalBatch(), t.dataset, t.seed});
  optimizer_->set_steps(m.optimizer_step);
  start_step_ = m.step;
  if (mesh_.world().rank() == 0) {
    events_.Log("info", "resumed from " + checkpoint_dir + " at step " + std::to_string(m.step) +
                            " (written under dp=" + std::to_string(m.dp) + " tp=" + std::to_string(m.tp) +
                            " ep=" + std::to_string(m.ep) + ")" +
                            (m.step >= t.steps ? "; training.steps=" + std::to_string(t.steps) + " are done" : ""));
  }
  return m.step;
}

std::string Trainer::LoadWeights(const std::string& path) {
  if (!fsdp_) return LoadInitialWeights(path, *model_);
  // Every rank loads the full TP/EP-local tensors it would hold without FSDP, then
  // keeps its rows; the gather only gives the parameters their shapes back.
  fsdp_->GatherAll();
  try {
    std::string loaded = LoadInitialWeights(path, *model_);
    fsdp_->ReshardFromModule();
    return loaded;
  } catch (...) {
    fsdp_->ReleaseAll();
    throw;
  }
}

NamedTensors Trainer::FullState() {
  if (fsdp_) fsdp_->GatherAll();
  NamedTensors full = GatherFullState(*model_, mesh_);
  if (fsdp_) fsdp_->ReleaseAll();
  return full;
}

int64_t Trainer::PersistentStateBytes() const {
  int64_t elements = 0;
  for (const auto& p : params_) elements += p.numel();
  return elements * int64_t{16};  // fp32 parameter, gradient, AdamW m and v
}

v1::Validation Trainer::Evaluate(int64_t step) {
  v1::Validation v = evaluator_->Run(step);
  if (fsdp_) fsdp_->ReleaseAll();
  return v;
}

bool Trainer::TakeCheckpointRequest() {
  const std::string& request = options_.checkpoint_request_path;
  struct stat st {};
  if (request.empty() || ::stat(request.c_str(), &st) != 0 || ::unlink(request.c_str()) != 0) return false;
  // The kernel stamps files from a coarse clock (a tick behind at most): only a file
  // clearly older than the last agreed save is taken for one it already answered.
  const auto written = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
  return written + std::chrono::milliseconds(20) >= requests_served_until_;
}

}  // namespace trainyard::engine
