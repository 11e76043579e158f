#include "common/spec_defaults.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainyard {
namespace {

struct Preset {
  const char* name;
  v1::ModelSpec model;
  int32_t seq_len;
  int32_t batch_size;
};

v1::ModelSpec DebugModel() {
  v1::ModelSpec m;
  m.set_vocab_size(2048);
  m.set_dim(256);
  m.set_n_layers(4);
  m.set_n_dense_layers(1);
  m.set_n_heads(8);
  m.set_n_kv_heads(4);
  m.set_ffn_hidden(768);
  m.set_n_routed_experts(8);
  m.set_top_k(2);
  m.set_n_shared_experts(1);
  m.set_expert_hidden(256);
  m.set_score_func("sigmoid");
  m.set_route_norm(true);
  m.set_route_scale(1.0);
  m.set_rope_theta(10000.0);
  m.set_norm_eps(1e-5);
  m.set_load_balance_coeff(1e-3);
  return m;
}

v1::ModelSpec TinyModel() {
  v1::ModelSpec m = DebugModel();
  m.set_vocab_size(256);
  m.set_dim(64);
  m.set_n_layers(2);
  m.set_n_dense_layers(1);
  m.set_n_heads(4);
  m.set_n_kv_heads(2);
  m.set_ffn_hidden(128);
  m.set_n_routed_experts(4);
  m.set_top_k(2);
  m.set_n_shared_experts(1);
  m.set_expert_hidden(32);
  return m;
}

const std::vector<Preset>& Presets() {
  static const auto* presets = new std::vector<Preset>{
      {"debug", DebugModel(), 256, 8},
      {"tiny", TinyModel(), 32, 4},
  };
  return *presets;
}

constexpr int32_t kDefaultWarmupSteps = 10;

// Everything but the preset-dependent model and training sizes.
v1::JobSpec BaseDefaults() {
  v1::JobSpec d;
  d.mutable_job()->set_name("job");
  d.mutable_job()->set_priority(0);

  v1::TrainingSpec* t = d.mutable_training();
  t->set_steps(100);
  t->set_lr(8e-4);
  t->set_warmup_steps(kDefaultWarmupSteps);
  t->set_max_norm(1.0);
  t->set_seed(42);
  t->set_dataset("synthetic");
  t->set_dataset_path("");
  t->set_log_freq(1);

  v1::ParallelismSpec* p = d.mutable_parallelism();
  p->set_dp(1);
  p->set_tp(1);
  p->set_ep(1);
  p->set_collective_timeout_s(300.0);

  v1::CompileSpec* c = d.mutable_compile();
  c->set_backend("eager");
  c->set_regions("per_layer");
  c->set_recompile_limit(8);
  c->set_on_side_effect("error");
  c->set_preflight(false);
  c->set_summary_every(100);
  c->set_test_plant_side_effect(false);

  d.mutable_activation_checkpoint()->set_mode("none");

  v1::ProfilingSpec* prof = d.mutable_profiling();
  prof->set_enable(false);
  prof->set_freq(100);
  prof->set_warmup(3);
  prof->set_active(2);

  v1::CheckpointSpec* ck = d.mutable_checkpoint();
  ck->set_interval(0);
  ck->set_keep(3);
  ck->set_initial_load_path("");

  d.mutable_resources()->set_device("cpu");
  d.mutable_resources()->set_ranks_per_worker(0);

  d.mutable_restart()->set_max_restarts(0);
  return d;
}

}  // namespace

absl::Status ApplyPresetAndDefaults(v1::JobSpec* spec) {
  const std::string preset_name =
      spec->model().has_preset() ? spec->model().preset() : kDefaultPreset;
  const Preset* preset = nullptr;
  std::vector<std::string> known;
  for (const Preset& p : Presets()) {
    known.push_back(p.name);
    if (preset_name == p.name) preset = &p;
  }
  if (preset == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("model.preset: unknown preset \"", preset_name,
                                                   "\" (known: ", absl::StrJoin(known, ", "), ")"));
  }

  v1::JobSpec normalised = BaseDefaults();
  *normalised.mutable_model() = preset->model;
  normalised.mutable_model()->set_preset(preset->name);
  normalised.mutable_training()->set_seq_len(preset->seq_len);
  normalised.mutable_training()->set_batch_size(preset->batch_size);
  const bool warmup_given = spec->training().has_warmup_steps();

  // MergeFrom copies exactly the fields that are present in `spec` (proto3 `optional`
  // has explicit presence), so explicit keys override preset and defaults.
  normalised.MergeFrom(*spec);

  if (!warmup_given) {
    v1::TrainingSpec* t = normalised.mutable_training();
    t->set_warmup_steps(std::max(0, std::min(kDefaultWarmupSteps, t->steps())));
  }
  *spec = std::move(normalised);
  return absl::OkStatus();
}

int WorldSize(const v1::JobSpec& spec) {
  const int64_t dp = spec.parallelism().has_dp() ? spec.parallelism().dp() : 1;
  const int64_t tp = spec.parallelism().has_tp() ? spec.parallelism().tp() : 1;
  const int64_t world = dp * tp;  // both fit in int32, so the product fits in int64
  if (world > std::numeric_limits<int>::max()) return std::numeric_limits<int>::max();
  if (world < std::numeric_limits<int>::min()) return std::numeric_limits<int>::min();
  return static_cast<int>(world);
}

}  // namespace trainyard
