#include "common/spec_validation.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

constexpr int32_t kMinPriority = -1000;
constexpr int32_t kMaxPriority = 1000;
constexpr size_t kMaxNameLength = 128;
constexpr size_t kMaxPathLength = 4096;

absl::Status Positive(absl::string_view path, int64_t value) {
  if (value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(path, " must be positive, got ", value));
}

absl::Status PositiveReal(absl::string_view path, double value) {
  if (value > 0) return absl::OkStatus();  // also rejects NaN
  return absl::InvalidArgumentError(absl::StrCat(path, " must be positive, got ", value));
}

absl::Status NonNegative(absl::string_view path, int64_t value) {
  if (value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(path, " must be >= 0, got ", value));
}

absl::Status NonNegativeReal(absl::string_view path, double value) {
  if (value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(path, " must be >= 0, got ", value));
}

absl::Status AtMostLength(absl::string_view path, const std::string& value, size_t limit) {
  if (value.size() <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(path, " is ", value.size(), " bytes long, over the limit of ", limit));
}

absl::Status OneOf(absl::string_view path, absl::string_view noun, const std::string& value,
                   std::initializer_list<absl::string_view> known) {
  for (absl::string_view k : known) {
    if (value == k) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": unknown ", noun, " \"", value,
                                                 "\" (known: ", absl::StrJoin(known, ", "), ")"));
}

absl::Status ValidateJobName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength) {
    return absl::InvalidArgumentError(absl::StrCat("job.name must be 1 to ", kMaxNameLength,
                                                   " characters long, got ", name.size()));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("job.name \"", absl::CHexEscape(name),
                       "\" may contain only letters, digits, '.', '_' and '-'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRanges(const v1::JobSpec& s) {
  const v1::JobMeta& job = s.job();
  TY_RETURN_IF_ERROR(ValidateJobName(job.name()));
  if (job.priority() < kMinPriority || job.priority() > kMaxPriority) {
    return absl::InvalidArgumentError(absl::StrCat("job.priority must be in [", kMinPriority, ", ",
                                                   kMaxPriority, "], got ", job.priority()));
  }

  const v1::ModelSpec& m = s.model();
  TY_RETURN_IF_ERROR(Positive("model.vocab_size", m.vocab_size()));
  TY_RETURN_IF_ERROR(Positive("model.dim", m.dim()));
  TY_RETURN_IF_ERROR(Positive("model.n_layers", m.n_layers()));
  if (m.n_dense_layers() < 0 || m.n_dense_layers() > m.n_layers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.n_dense_layers must be in [0, model.n_layers=", m.n_layers(), "], got ",
                     m.n_dense_layers()));
  }
  TY_RETURN_IF_ERROR(Positive("model.n_heads", m.n_heads()));
  TY_RETURN_IF_ERROR(Positive("model.n_kv_heads", m.n_kv_heads()));
  TY_RETURN_IF_ERROR(Positive("model.ffn_hidden", m.ffn_hidden()));
  TY_RETURN_IF_ERROR(Positive("model.n_routed_experts", m.n_routed_experts()));
  if (m.top_k() < 1 || m.top_k() > m.n_routed_experts()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.top_k must be in [1, model.n_routed_experts=", m.n_routed_experts(),
                     "], got ", m.top_k()));
  }
  TY_RETURN_IF_ERROR(NonNegative("model.n_shared_experts", m.n_shared_experts()));
  TY_RETURN_IF_ERROR(Positive("model.expert_hidden", m.expert_hidden()));
  TY_RETURN_IF_ERROR(PositiveReal("model.route_scale", m.route_scale()));
  TY_RETURN_IF_ERROR(PositiveReal("model.rope_theta", m.rope_theta()));
  TY_RETURN_IF_ERROR(PositiveReal("model.norm_eps", m.norm_eps()));
  TY_RETURN_IF_ERROR(NonNegativeReal("model.load_balance_coeff", m.load_balance_coeff()));

  const v1::TrainingSpec& t = s.training();
  TY_RETURN_IF_ERROR(Positive("training.steps", t.steps()));
  TY_RETURN_IF_ERROR(Positive("training.batch_size", t.batch_size()));
  TY_RETURN_IF_ERROR(Positive("training.seq_len", t.seq_len()));
  TY_RETURN_IF_ERROR(PositiveReal("training.lr", t.lr()));
  TY_RETURN_IF_ERROR(NonNegative("training.warmup_steps", t.warmup_steps()));
  TY_RETURN_IF_ERROR(PositiveReal("training.max_norm", t.max_norm()));
  TY_RETURN_IF_ERROR(Positive("training.log_freq", t.log_freq()));
  TY_RETURN_IF_ERROR(AtMostLength("training.dataset_path", t.dataset_path(), kMaxPathLength));

  const v1::ParallelismSpec& p = s.parallelism();
  TY_RETURN_IF_ERROR(Positive("parallelism.dp", p.dp()));
  TY_RETURN_IF_ERROR(Positive("parallelism.tp", p.tp()));
  TY_RETURN_IF_ERROR(Positive("parallelism.ep", p.ep()));
  TY_RETURN_IF_ERROR(PositiveReal("parallelism.collective_timeout_s", p.collective_timeout_s()));

  const v1::CompileSpec& c = s.compile();
  if (c.recompile_limit() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("compile.recompile_limit must be >= 1, got ", c.recompile_limit()));
  }
  if (c.summary_every() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("compile.summary_every must be >= 1, got ", c.summary_every()));
  }

  const v1::ProfilingSpec& prof = s.profiling();
  TY_RETURN_IF_ERROR(Positive("profiling.freq", prof.freq()));
  TY_RETURN_IF_ERROR(NonNegative("profiling.warmup", prof.warmup()));
  TY_RETURN_IF_ERROR(Positive("profiling.active", prof.active()));
  if (static_cast<int64_t>(prof.warmup()) + prof.active() > prof.freq()) {
    return absl::InvalidArgumentError(
        absl::StrCat("profiling.warmup + profiling.active must be <= profiling.freq, got ",
                     prof.warmup(), " + ", prof.active(), " > ", prof.freq()));
  }

  const v1::CheckpointSpec& ck = s.checkpoint();
  TY_RETURN_IF_ERROR(NonNegative("checkpoint.interval", ck.interval()));
  TY_RETURN_IF_ERROR(NonNegative("checkpoint.keep", ck.keep()));
  TY_RETURN_IF_ERROR(
      AtMostLength("checkpoint.initial_load_path", ck.initial_load_path(), kMaxPathLength));

  TY_RETURN_IF_ERROR(NonNegative("resources.ranks_per_worker", s.resources().ranks_per_worker()));
  TY_RETURN_IF_ERROR(NonNegative("restart.max_restarts", s.restart().max_restarts()));
  return absl::OkStatus();
}

absl::Status ValidateEnums(const v1::JobSpec& s) {
  TY_RETURN_IF_ERROR(
      OneOf("model.score_func", "score function", s.model().score_func(), {"sigmoid", "softmax"}));
  TY_RETURN_IF_ERROR(OneOf("training.dataset", "dataset", s.training().dataset(),
                           {"synthetic", "text", "tokens"}));
  TY_RETURN_IF_ERROR(
      OneOf("compile.backend", "backend", s.compile().backend(), {"eager", "jit", "cudagraph"}));
  TY_RETURN_IF_ERROR(
      OneOf("compile.regions", "regions mode", s.compile().regions(), {"per_layer", "model"}));
  TY_RETURN_IF_ERROR(OneOf("compile.on_side_effect", "policy", s.compile().on_side_effect(),
                           {"error", "fallback"}));
  TY_RETURN_IF_ERROR(OneOf("activation_checkpoint.mode", "mode", s.activation_checkpoint().mode(),
                           {"none", "full", "selective"}));
  TY_RETURN_IF_ERROR(OneOf("resources.device", "device", s.resources().device(), {"cpu", "cuda"}));
  return absl::OkStatus();
}

absl::Status ValidateModelShape(const v1::ModelSpec& m) {
  if (m.dim() % m.n_heads() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.dim=", m.dim(), " must be divisible by model.n_heads=", m.n_heads()));
  }
  if (m.n_heads() % m.n_kv_heads() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.n_heads=", m.n_heads(), " must be divisible by model.n_kv_heads=", m.n_kv_heads(),
        " (grouped-query attention)"));
  }
  const int head_dim = m.dim() / m.n_heads();
  if (head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim = model.dim / model.n_heads = ", m.dim(), "/", m.n_heads(), " = ",
                     head_dim, " must be even (RoPE rotates pairs of dimensions)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateParallelism(const v1::JobSpec& s) {
  const v1::ModelSpec& m = s.model();
  const v1::ParallelismSpec& p = s.parallelism();
  const int tp = p.tp();
  if (m.n_heads() % tp != 0 || m.n_kv_heads() % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("parallelism.tp=", tp,
                                                   " must divide model.n_heads=", m.n_heads(),
                                                   " and model.n_kv_heads=", m.n_kv_heads()));
  }
  if (m.ffn_hidden() % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallelism.tp=", tp, " must divide model.ffn_hidden=", m.ffn_hidden()));
  }
  if (m.expert_hidden() % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallelism.tp=", tp, " must divide model.expert_hidden=", m.expert_hidden()));
  }
  const int ranks_per_worker = s.resources().ranks_per_worker();
  if (ranks_per_worker > 0 && tp > ranks_per_worker) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallelism.tp=", tp, " must be at most resources.ranks_per_worker=", ranks_per_worker,
        " (a tensor-parallel group never spans workers)"));
  }
  const int ep = p.ep();
  if (m.n_routed_experts() % ep != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallelism.ep=", ep, " must divide model.n_routed_experts=", m.n_routed_experts()));
  }
  const int64_t dp_tp = static_cast<int64_t>(p.dp()) * tp;
  if (dp_tp % ep != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallelism.ep=", ep, " must divide dp·tp=", dp_tp));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const v1::JobSpec& s, int total_connected_slots) {
  TY_RETURN_IF_ERROR(ValidateRanges(s));
  TY_RETURN_IF_ERROR(ValidateEnums(s));
  TY_RETURN_IF_ERROR(ValidateModelShape(s.model()));
  TY_RETURN_IF_ERROR(ValidateParallelism(s));

  const std::string& dataset = s.training().dataset();
  if ((dataset == "text" || dataset == "tokens") && s.training().dataset_path().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.dataset_path must be set when "
                     "training.dataset is \"",
                     dataset, "\""));
  }

  if (total_connected_slots != kSkipSlotCheck) {
    const int64_t world = static_cast<int64_t>(s.parallelism().dp()) * s.parallelism().tp();
    if (world > total_connected_slots) {
      return absl::InvalidArgumentError(absl::StrCat(
          "world size dp·tp=", world, " exceeds the ", total_connected_slots,
          " slots of all connected workers (lower parallelism.dp=", s.parallelism().dp(),
          " or parallelism.tp=", s.parallelism().tp(), ", or connect more workers)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSupported(const v1::JobSpec& s) {
  // ValidateJobSpec already refused unknown backends and modes; eager and jit compile
  // on CPU, and every activation_checkpoint.mode and compile.regions is built.
  if (s.compile().backend() == "cudagraph") {
    return absl::UnimplementedError(
        "compile.backend=cudagraph: the cudagraph backend needs a CUDA worker, and the "
        "workers of this controller are CPU-only (resources.device=cpu is the only device "
        "built); use compile.backend=jit or eager");
  }
  if (s.profiling().enable()) {
    return absl::UnimplementedError(
        "profiling.enable=true: the profiler is not built yet (set profiling.enable=false)");
  }
  if (s.checkpoint().interval() > 0) {
    return absl::UnimplementedError(
        absl::StrCat("checkpoint.interval=", s.checkpoint().interval(),
                     ": checkpointing is not built yet (set checkpoint.interval=0)"));
  }
  if (!s.checkpoint().initial_load_path().empty()) {
    return absl::UnimplementedError(
        "checkpoint.initial_load_path: loading checkpoints is not built yet");
  }
  if (s.resources().device() != "cpu") {
    return absl::UnimplementedError(
        absl::StrCat("resources.device=", s.resources().device(),
                     ": GPU training is not built yet (this release trains on cpu only)"));
  }
  if (s.training().dataset() != "synthetic") {
    return absl::UnimplementedError(absl::StrCat(
        "training.dataset=", s.training().dataset(),
        ": file datasets are not built yet (this release trains on synthetic data only)"));
  }
  return absl::OkStatus();
}

}  // namespace trainyard
