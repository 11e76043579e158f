#include "common/spec/rules.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/base/text.h"
#include "common/spec/dependencies.h"
#include "common/spec/pipeline_stages.h"
#include "common/spec/rule_checks.h"
#include "common/spec/schema.h"

namespace trainyard::spec {
namespace rules_internal {
namespace {

std::string Num(double v) { return ToText(FieldValue{v}); }

}  // namespace

// "[lo, hi]" with "(" when lo is excluded.
Check InRange(const std::string& path, double value, double lo, double hi, bool lo_open) {
  const bool ok = (lo_open ? value > lo : value >= lo) && value <= hi;  // NaN fails both
  if (ok) return std::nullopt;
  return Invalid(path, "range",
                 path + " must be in " + (lo_open ? "(" : "[") + Num(lo) + ", " + Num(hi) + "], got " + Num(value));
}

Check IntRange(const std::string& path, std::int64_t value, std::int64_t lo, std::int64_t hi,
               const std::string& lo_name, const std::string& hi_name) {
  if (value >= lo && value <= hi) return std::nullopt;
  const std::string lo_text = lo_name.empty() ? std::to_string(lo) : lo_name + "=" + std::to_string(lo);
  const std::string hi_text = hi_name.empty() ? std::to_string(hi) : hi_name + "=" + std::to_string(hi);
  return Invalid(path, "range", path + " must be in [" + lo_text + ", " + hi_text + "], got " + std::to_string(value));
}

Check OneOf(const std::string& path, const std::string& value, const std::vector<std::string>& known) {
  if (std::find(known.begin(), known.end(), value) != known.end()) return std::nullopt;
  std::string list;
  for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
  return Invalid(path, "one_of", path + ": unknown value \"" + Quote(value) + "\" (known: " + list + ")");
}

}  // namespace rules_internal

namespace {

using rules_internal::Check;
using rules_internal::InRange;
using rules_internal::IntRange;
using rules_internal::OneOf;

Check MaxLength(const std::string& path, const std::string& value, std::size_t limit) {
  if (value.size() <= limit) return std::nullopt;
  return Invalid(
      path, "length",
      path + " is " + std::to_string(value.size()) + " bytes long, over the limit of " + std::to_string(limit));
}

// A file path: no control characters (a NUL would cut the path the engine opens).
Check Path(const std::string& path, const std::string& value) {
  if (Check c = MaxLength(path, value, kMaxPathLength)) return c;
  for (char c : value) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return Invalid(path, "charset", path + " \"" + Quote(value) + "\" contains a control character");
    }
  }
  return std::nullopt;
}

// A path the ranks open or write on their workers: absolute (ranks of one job run in
// different working directories) and plain, with no empty, "." or ".." component, so
// it names one place spelled one way and cannot climb out of the folder it names (the
// controller names a job's checkpoints dir/<job id>/step-..., and matches what the
// ranks report against it). Empty means unset and passes.
Check PlainAbsolutePath(const std::string& path, const std::string& value) {
  if (value.empty()) return std::nullopt;
  if (value.front() != '/') {
    return Invalid(path, "requires",
                   path + " \"" + Quote(value) +
                       "\" must be an absolute path (ranks of one job run in different working directories)");
  }
  std::string_view rest(value);
  while (rest.size() > 1 && rest.back() == '/') rest.remove_suffix(1);
  std::size_t start = 1;
  while (start <= rest.size() && rest.size() > 1) {
    const std::size_t end = std::min(rest.find('/', start), rest.size());
    const std::string_view part = rest.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return Invalid(
          path, "requires",
          path + " \"" + Quote(value) + "\" must be a plain absolute path: no empty, \".\" or \"..\" components");
    }
    start = end + 1;
  }
  return std::nullopt;
}

Check JobName(const std::string& name) {
  if (name.empty() || name.size() > kMaxNameLength) {
    return Invalid("job.name", "length",
                   "job.name must be 1 to " + std::to_string(kMaxNameLength) + " characters long, got " +
                       std::to_string(name.size()));
  }
  for (char c : name) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Invalid("job.name", "charset",
                     "job.name \"" + Quote(name) + "\" may contain only letters, digits, '.', '_' and '-'");
    }
  }
  return std::nullopt;
}

// Every text value is UTF-8: proto3 strings, JSON and TOML cannot carry anything else.
Check Utf8(const JobSpec& s) {
  Check out;
  ForEachField(s, [&](const char* section, const char* key, const auto& member) {
    if constexpr (std::is_same_v<std::decay_t<decltype(member)>, std::string>) {
      if (!out && !IsUtf8(member)) {
        const std::string path = std::string(section) + "." + key;
        out = Invalid(path, "utf8", path + " \"" + Quote(member) + "\" is not valid UTF-8");
      }
    }
  });
  return out;
}

Check Job(const JobMeta& j) {
  TY_SPEC_CHECK(JobName(j.name));
  TY_SPEC_CHECK(IntRange("job.priority", j.priority, -1000, 1000));
  TY_SPEC_CHECK(IntRange("job.time_limit_s", j.time_limit_s, 0, 366 * 24 * 3600));
  if (auto after = ParseAfter(j.after); !after.ok()) return after.error();
  return std::nullopt;
}

// SECTION.dataset and SECTION.dataset_path (training or validation). The path is a
// comma-separated list of entries, each a plain absolute path or a glob(7) pattern
// over one (the ranks expand it, in the listed order, each glob's matches sorted
// bytewise). "tokens" entries name a flat file by its width (.u16, .u32; .bin of uint16
// as nanoGPT writes it) or a Megatron indexed dataset (.idx, or .bin with its .idx
// beside it). `optional`: "" turns the section off.
Check DatasetSource(const std::string& section, const std::string& dataset, const std::string& path, const ModelSpec& m,
                    bool optional) {
  const std::string kind_key = section + ".dataset";
  const std::string path_key = section + ".dataset_path";
  if (optional && dataset.empty()) {
    if (!path.empty()) {
      return Invalid(path_key, "requires", path_key + " is set but " + kind_key + " is not");
    }
    return std::nullopt;
  }
  TY_SPEC_CHECK(OneOf(kind_key, dataset, Datasets()));
  TY_SPEC_CHECK(Path(path_key, path));
  if (dataset == "synthetic") {
    if (!path.empty()) {
      return Invalid(path_key, "requires", path_key + " must be empty when " + kind_key + " is \"synthetic\"");
    }
    return std::nullopt;
  }
  if (path.empty()) {
    return Invalid(path_key, "requires", path_key + " must be set when " + kind_key + " is \"" + dataset + "\"");
  }
  std::size_t start = 0;
  int entries = 0;
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find(',', start), path.size());
    const std::string entry = path.substr(start, end - start);
    start = end + 1;
    if (++entries > kMaxDatasetEntries) {
      return Invalid(path_key, "length",
                     path_key + " lists more than " + std::to_string(kMaxDatasetEntries) + " entries (use a glob)");
    }
    if (entry.empty()) {
      return Invalid(path_key, "requires", path_key + " \"" + Quote(path) + "\" has an empty entry");
    }
    TY_SPEC_CHECK(PlainAbsolutePath(path_key, entry));
    if (dataset == "tokens") {
      auto ends = [&](const char* suffix) {
        const std::size_t n = std::char_traits<char>::length(suffix);
        return entry.size() >= n && entry.compare(entry.size() - n, n, suffix) == 0;
      };
      if (!ends(".u16") && !ends(".u32") && !ends(".bin") && !ends(".idx")) {
        return Invalid(path_key, "requires",
                       path_key + " entry \"" + Quote(entry) + "\" must end in .u16 or .u32 (flat tokens of that " +
                           "width), .bin (nanoGPT's uint16, or Megatron's with its .idx beside it) or .idx " +
                           "(Megatron indexed) when " + kind_key + " is \"tokens\"");
      }
    }
  }
  if (dataset == "text" && m.vocab_size < 256) {
    return Invalid("model.vocab_size", "requires",
                   "model.vocab_size must be at least 256 for " + kind_key + " \"text\" (byte-level), got " +
                       std::to_string(m.vocab_size));
  }
  return std::nullopt;
}

Check Training(const TrainingSpec& t, const ModelSpec& m) {
  TY_SPEC_CHECK(IntRange("training.steps", t.steps, 1, 1000000000));
  TY_SPEC_CHECK(IntRange("training.batch_size", t.batch_size, 1, 1 << 20));
  TY_SPEC_CHECK(IntRange("training.seq_len", t.seq_len, 1, 1 << 20));
  TY_SPEC_CHECK(InRange("training.lr", t.lr, 0, 10, /*lo_open=*/true));
  TY_SPEC_CHECK(IntRange("training.warmup_steps", t.warmup_steps, 0, 1000000000));
  TY_SPEC_CHECK(InRange("training.max_norm", t.max_norm, 0, 1e12, /*lo_open=*/true));
  TY_SPEC_CHECK(DatasetSource("training", t.dataset, t.dataset_path, m, /*optional=*/false));
  TY_SPEC_CHECK(IntRange("training.log_freq", t.log_freq, 1, 1000000000));
  TY_SPEC_CHECK(IntRange("training.grad_accum_steps", t.grad_accum_steps, 1, 1024));
  TY_SPEC_CHECK(InRange("training.step_timeout_s", t.step_timeout_s, 0, 1e7));
  TY_SPEC_CHECK(OneOf("training.mixed_precision", t.mixed_precision, MixedPrecisions()));
  return std::nullopt;
}

Check Validation(const JobSpec& s) {
  const ValidationSpec& v = s.validation;
  TY_SPEC_CHECK(DatasetSource("validation", v.dataset, v.dataset_path, s.model, /*optional=*/true));
  TY_SPEC_CHECK(IntRange("validation.freq", v.freq, 1, 1000000000));
  TY_SPEC_CHECK(IntRange("validation.steps", v.steps, 1, 1000000));
  return std::nullopt;
}

Check Parallelism(const JobSpec& s) {
  const ParallelismSpec& p = s.parallelism;
  const ModelSpec& m = s.model;
  TY_SPEC_CHECK(IntRange("parallelism.dp", p.dp, 1, kMaxWorldSize));
  TY_SPEC_CHECK(IntRange("parallelism.tp", p.tp, 1, kMaxWorldSize));
  TY_SPEC_CHECK(IntRange("parallelism.ep", p.ep, 1, kMaxWorldSize));
  TY_SPEC_CHECK(InRange("parallelism.collective_timeout_s", p.collective_timeout_s, 0.001, 1e7));
  const std::int64_t world = std::int64_t{p.dp} * p.tp;
  if (world > kMaxWorldSize) {
    return Invalid("parallelism.dp", "range",
                   "parallelism.dp=" + std::to_string(p.dp) + " times parallelism.tp=" + std::to_string(p.tp) + " = " +
                       std::to_string(world) + " ranks, over the limit of " + std::to_string(kMaxWorldSize));
  }
  const std::string tp = "parallelism.tp=" + std::to_string(p.tp);
  if (m.n_heads % p.tp != 0 || m.n_kv_heads % p.tp != 0) {
    return Invalid("parallelism.tp", "divides",
                   tp + " must divide model.n_heads=" + std::to_string(m.n_heads) +
                       " and model.n_kv_heads=" + std::to_string(m.n_kv_heads));
  }
  if (m.n_dense_layers > 0 && m.ffn_hidden % p.tp != 0) {
    return Invalid("parallelism.tp", "divides", tp + " must divide model.ffn_hidden=" + std::to_string(m.ffn_hidden));
  }
  const std::int64_t shared_hidden = std::int64_t{m.expert_hidden} * m.n_shared_experts;
  if (m.n_moe_layers() > 0 && shared_hidden % p.tp != 0) {
    return Invalid("parallelism.tp", "divides",
                   tp + " must divide the shared-expert hidden size model.expert_hidden*model.n_shared_experts=" +
                       std::to_string(shared_hidden));
  }
  const int ranks_per_worker = s.resources.ranks_per_worker;
  if (ranks_per_worker > 0 && p.tp > ranks_per_worker) {
    return Invalid("parallelism.tp", "requires",
                   tp + " must be at most resources.ranks_per_worker=" + std::to_string(ranks_per_worker) +
                       " (a tensor-parallel group never spans workers)");
  }
  const std::string ep = "parallelism.ep=" + std::to_string(p.ep);
  if (m.n_routed_experts % p.ep != 0) {
    return Invalid("parallelism.ep", "divides",
                   ep + " must divide model.n_routed_experts=" + std::to_string(m.n_routed_experts));
  }
  if (world % p.ep != 0) {
    return Invalid("parallelism.ep", "divides", ep + " must divide dp*tp=" + std::to_string(world));
  }
  TY_SPEC_CHECK(IntRange("parallelism.dp_shard", p.dp_shard, 1, kMaxWorldSize));
  const std::string shard = "parallelism.dp_shard=" + std::to_string(p.dp_shard);
  if (p.dp % p.dp_shard != 0) {
    return Invalid("parallelism.dp_shard", "divides",
                   shard + " must divide parallelism.dp=" + std::to_string(p.dp) +
                       " (dp = dp_replicate * dp_shard: the data-parallel ranks are replicas of dp_shard ranks each)");
  }
  TY_SPEC_CHECK(IntRange("parallelism.dp_replicate", p.dp_replicate, 0, kMaxWorldSize));
  if (p.dp_replicate != 0 && p.dp_replicate * p.dp_shard != p.dp) {
    return Invalid("parallelism.dp_replicate", "requires",
                   "parallelism.dp_replicate=" + std::to_string(p.dp_replicate) + " times " + shard +
                       " must equal parallelism.dp=" + std::to_string(p.dp) +
                       " (or leave dp_replicate out: it is dp / dp_shard)");
  }
  // The capacity counts per sequence, and TP rank t routes the slice t of a
  // micro-batch's tokens: the slices must be whole sequences.
  if (m.capacity_factor > 0 && p.tp > 1 && s.training.batch_size % p.tp != 0) {
    return Invalid("model.capacity_factor", "requires",
                   "model.capacity_factor with " + tp +
                       " needs training.batch_size=" + std::to_string(s.training.batch_size) +
                       " divisible by parallelism.tp (the capacity counts per sequence, and each TP rank routes "
                       "whole sequences)");
  }
  // The ranks of one replica are dp_shard*tp consecutive ranks; an EP group must lie
  // inside one replica or cover whole replicas, so that every rank's experts are
  // sharded over equally many ranks (docs/parallelism.md).
  const std::int64_t replica = std::int64_t{p.dp_shard} * p.tp;
  if (p.dp_shard > 1 && replica % p.ep != 0 && p.ep % replica != 0) {
    return Invalid("parallelism.ep", "divides",
                   ep + " must divide dp_shard*tp=" + std::to_string(replica) + " or be a multiple of it (" + shard +
                       ": an expert-parallel group lies inside one replica or covers whole replicas)");
  }
  return std::nullopt;
}

// The pipeline keys (docs/parallelism.md, "Pipeline parallelism"). They are checked
// whatever pp is, so a job file means the same once pp > 1 runs; with pp = 1 they
// change nothing. Runs after Parallelism (dp and tp in range) and Model (n_layers).
Check Pipeline(const JobSpec& s) {
  const ParallelismSpec& p = s.parallelism;
  const ModelSpec& m = s.model;
  TY_SPEC_CHECK(IntRange("parallelism.pp", p.pp, 1, kMaxWorldSize));
  const std::string pp = "parallelism.pp=" + std::to_string(p.pp);
  const std::int64_t world = std::int64_t{p.pp} * p.dp * p.tp;
  if (world > kMaxWorldSize) {
    return Invalid("parallelism.pp", "range",
                   pp + " times dp*tp=" + std::to_string(std::int64_t{p.dp} * p.tp) + " = " + std::to_string(world) +
                       " ranks, over the limit of " + std::to_string(kMaxWorldSize));
  }
  if (p.pp_schedule == "zbv") {
    return Unimplemented("parallelism.pp_schedule",
                         "parallelism.pp_schedule=\"zbv\" (torchtitan's ZBVZeroBubble) is not built in this version; "
                         "use \"1f1b\" or \"interleaved_1f1b\"");
  }
  TY_SPEC_CHECK(OneOf("parallelism.pp_schedule", p.pp_schedule, PipelineSchedules()));
  const bool interleaved = p.pp_schedule == "interleaved_1f1b";
  const std::string schedule = "parallelism.pp_schedule=\"" + p.pp_schedule + "\"";

  const int batch = s.training.batch_size;  // >= 1: Training ran first
  TY_SPEC_CHECK(IntRange("parallelism.pp_microbatches", p.pp_microbatches, 0, batch, "", "training.batch_size"));
  if (p.pp_microbatches > 0 && batch % p.pp_microbatches != 0) {
    return Invalid("parallelism.pp_microbatches", "divides",
                   "parallelism.pp_microbatches=" + std::to_string(p.pp_microbatches) +
                       " must divide training.batch_size=" + std::to_string(batch) +
                       " (a microbatch is batch_size / pp_microbatches whole sequences)");
  }

  // Stages per rank: 1F1B runs one; the interleaved schedule loops over two or more.
  TY_SPEC_CHECK(IntRange("parallelism.pp_virtual_stages", p.pp_virtual_stages, 0, kMaxLayers));
  const std::string virt = "parallelism.pp_virtual_stages=" + std::to_string(p.pp_virtual_stages);
  if (!interleaved && p.pp_virtual_stages > 1) {
    return Invalid("parallelism.pp_virtual_stages", "requires",
                   virt + " needs parallelism.pp_schedule=\"interleaved_1f1b\" (" + schedule +
                       " runs one stage a rank: leave the key out or set 1)");
  }
  if (interleaved && p.pp_virtual_stages == 1) {
    return Invalid(
        "parallelism.pp_virtual_stages", "range",
        virt + " must be at least 2 under " + schedule + " (0 means 2; for one stage a rank use pp_schedule=\"1f1b\")");
  }

  TY_SPEC_CHECK(
      IntRange("parallelism.pp_layers_per_stage", p.pp_layers_per_stage, 0, m.n_layers, "", "model.n_layers"));
  TY_SPEC_CHECK(CheckPipelineLayers(s));

  // Megatron's interleaved schedule runs the microbatches in rounds of pp.
  const int micro = PipelineMicrobatches(s);
  if (interleaved && micro % p.pp != 0) {
    const std::string given = p.pp_microbatches > 0
                                  ? "parallelism.pp_microbatches=" + std::to_string(micro)
                                  : "parallelism.pp_microbatches=0 (training.batch_size=" + std::to_string(batch) +
                                        ": a sequence a microbatch)";
    return Invalid("parallelism.pp_microbatches", "divides",
                   given + " must be a multiple of " + pp + " under " + schedule +
                       " (it runs the microbatches in rounds of pp, as Megatron's does)");
  }
  return std::nullopt;
}

// Legal settings no engine of this release runs. Checked last, so a job hears of every
// invalid value before it hears that its layout is not built.
Check NotBuilt(const JobSpec& s) {
  if (s.parallelism.pp > 1) {
    return Unimplemented("parallelism.pp", "parallelism.pp=" + std::to_string(s.parallelism.pp) +
                                               ": pipeline parallelism is not built in this version (the pipeline "
                                               "keys are checked, but no engine runs pp > 1 yet); use "
                                               "parallelism.pp=1");
  }
  return std::nullopt;
}

Check Compile(const JobSpec& s) {
  const CompileSpec& c = s.compile;
  TY_SPEC_CHECK(OneOf("compile.backend", c.backend, Backends()));
  TY_SPEC_CHECK(OneOf("compile.regions", c.regions, RegionModes()));
  TY_SPEC_CHECK(IntRange("compile.recompile_limit", c.recompile_limit, 1, 1 << 16));
  TY_SPEC_CHECK(OneOf("compile.on_side_effect", c.on_side_effect, SideEffectPolicies()));
  TY_SPEC_CHECK(IntRange("compile.summary_every", c.summary_every, 1, 1000000000));
  TY_SPEC_CHECK(OneOf("activation_checkpoint.mode", s.activation_checkpoint.mode, CheckpointModes()));
  if (c.regions == "model" && s.parallelism.tp != 1) {
    return Invalid("compile.regions", "requires",
                   "compile.regions=\"model\" needs parallelism.tp=1: the TP all-reduces split every block, so use "
                   "compile.regions=\"per_layer\" with tp=" +
                       std::to_string(s.parallelism.tp));
  }
  if (c.regions == "model" && s.model.architecture != "trainyard") {
    return Invalid("compile.regions", "requires",
                   "compile.regions=\"model\" is built for model.architecture=\"trainyard\" only; use "
                   "compile.regions=\"per_layer\" with \"" +
                       Quote(s.model.architecture) + "\"");
  }
  if (c.regions == "model" && s.activation_checkpoint.mode == "selective") {
    return Invalid("activation_checkpoint.mode", "requires",
                   "activation_checkpoint.mode=\"selective\" needs compile.regions=\"per_layer\": under \"model\" "
                   "the attention is not a region of its own (use mode \"full\")");
  }
  if (c.backend == "cudagraph" && s.resources.device != "cuda") {
    return Invalid("compile.backend", "requires",
                   "compile.backend=\"cudagraph\" needs resources.device=\"cuda\" (CUDA graphs capture GPU work)");
  }
  if (c.backend == "cudagraph" && s.parallelism.dp_shard > 1) {
    return Invalid("compile.backend", "requires",
                   "compile.backend=\"cudagraph\" needs parallelism.dp_shard=1: FSDP gathers each weight into new "
                   "memory every step, which a captured CUDA graph cannot follow (use compile.backend=\"jit\" with "
                   "dp_shard=" +
                       std::to_string(s.parallelism.dp_shard) + ")");
  }
  return std::nullopt;
}

Check Rest(const JobSpec& s) {
  const ProfilingSpec& prof = s.profiling;
  TY_SPEC_CHECK(IntRange("profiling.freq", prof.freq, 1, 1000000000));
  TY_SPEC_CHECK(IntRange("profiling.warmup", prof.warmup, 0, 1000000000));
  TY_SPEC_CHECK(IntRange("profiling.active", prof.active, 1, 1000000000));
  if (std::int64_t{prof.warmup} + prof.active > prof.freq) {
    return Invalid("profiling.warmup", "range",
                   "profiling.warmup + profiling.active must be <= profiling.freq, got " + std::to_string(prof.warmup) +
                       " + " + std::to_string(prof.active) + " > " + std::to_string(prof.freq));
  }
  const CheckpointSpec& ck = s.checkpoint;
  TY_SPEC_CHECK(IntRange("checkpoint.interval", ck.interval, 0, 1000000000));
  TY_SPEC_CHECK(IntRange("checkpoint.keep", ck.keep, 0, 1000000));
  TY_SPEC_CHECK(Path("checkpoint.initial_load_path", ck.initial_load_path));
  TY_SPEC_CHECK(Path("checkpoint.dir", ck.dir));
  if (ck.interval > 0 && ck.dir.empty()) {
    return Invalid("checkpoint.dir", "requires",
                   "checkpoint.dir must be set when checkpoint.interval=" + std::to_string(ck.interval) +
                       " (a path every worker of the job can reach)");
  }
  TY_SPEC_CHECK(PlainAbsolutePath("checkpoint.dir", ck.dir));
  TY_SPEC_CHECK(PlainAbsolutePath("checkpoint.initial_load_path", ck.initial_load_path));
  if (ck.interval > 0 && ck.keep < 1) {
    return Invalid("checkpoint.keep", "requires",
                   "checkpoint.keep must be >= 1 when checkpoints are on, got " + std::to_string(ck.keep));
  }
  TY_SPEC_CHECK(IntRange("checkpoint.keep_best", ck.keep_best, 0, 1000000));
  TY_SPEC_CHECK(OneOf("checkpoint.best_metric", ck.best_metric, BestMetrics()));
  if (ck.keep_best > 0 && ck.dir.empty()) {
    return Invalid("checkpoint.keep_best", "requires",
                   "checkpoint.keep_best=" + std::to_string(ck.keep_best) +
                       " needs checkpoint.dir (the checkpoints it keeps are written there)");
  }
  // A checkpoint is ranked by the validation run at its own step: without a validation
  // dataset there is none.
  if (ck.keep_best > 0 && ck.best_metric == "val_loss" && s.validation.dataset.empty()) {
    return Invalid("checkpoint.best_metric", "requires",
                   "checkpoint.best_metric=\"val_loss\" with checkpoint.keep_best=" + std::to_string(ck.keep_best) +
                       " needs validation.dataset; set it, or rank by best_metric=\"train_loss\"");
  }
  TY_SPEC_CHECK(OneOf("resources.device", s.resources.device, Devices()));
  TY_SPEC_CHECK(IntRange("resources.ranks_per_worker", s.resources.ranks_per_worker, 0, kMaxWorldSize));
  TY_SPEC_CHECK(IntRange("restart.max_restarts", s.restart.max_restarts, 0, 1000));
  TY_SPEC_CHECK(InRange("restart.backoff_s", s.restart.backoff_s, 0, 3600, /*lo_open=*/false));
  TY_SPEC_CHECK(IntRange("restart.min_dp", s.restart.min_dp, 0, s.parallelism.dp));
  TY_SPEC_CHECK(InRange("restart.elastic_wait_s", s.restart.elastic_wait_s, 0, 86400, /*lo_open=*/false));
  return std::nullopt;
}

}  // namespace

const std::vector<std::string>& Architectures() {
  static const std::vector<std::string> v = {"trainyard", "deepseek_v3", "qwen3_moe"};
  return v;
}
const std::vector<std::string>& ScoreFuncs() {
  static const std::vector<std::string> v = {"sigmoid", "softmax"};
  return v;
}
const std::vector<std::string>& Datasets() {
  static const std::vector<std::string> v = {"synthetic", "text", "tokens"};
  return v;
}
const std::vector<std::string>& MixedPrecisions() {
  static const std::vector<std::string> v = {"fp32", "bf16"};
  return v;
}
const std::vector<std::string>& Backends() {
  static const std::vector<std::string> v = {"eager", "jit", "cudagraph"};
  return v;
}
const std::vector<std::string>& RegionModes() {
  static const std::vector<std::string> v = {"per_layer", "model"};
  return v;
}
const std::vector<std::string>& SideEffectPolicies() {
  static const std::vector<std::string> v = {"error", "fallback"};
  return v;
}
const std::vector<std::string>& CheckpointModes() {
  static const std::vector<std::string> v = {"none", "full", "selective"};
  return v;
}
const std::vector<std::string>& Devices() {
  static const std::vector<std::string> v = {"cpu", "cuda"};
  return v;
}
const std::vector<std::string>& PipelineSchedules() {
  static const std::vector<std::string> v = {"1f1b", "interleaved_1f1b"};
  return v;
}
const std::vector<std::string>& BestMetrics() {
  static const std::vector<std::string> v = {"val_loss", "train_loss"};
  return v;
}

std::optional<SpecError> Validate(const JobSpec& s) {
  // In order, each only after the ones before it held (later rules divide by sizes
  // that earlier rules proved positive).
  if (Check c = Utf8(s)) return c;
  if (Check c = Job(s.job)) return c;
  if (Check c = rules_internal::Model(s.model)) return c;
  if (Check c = Training(s.training, s.model)) return c;
  if (Check c = Parallelism(s)) return c;
  if (Check c = Pipeline(s)) return c;
  if (Check c = Compile(s)) return c;
  if (Check c = Validation(s)) return c;
  if (Check c = Rest(s)) return c;
  return NotBuilt(s);
}

}  // namespace trainyard::spec
