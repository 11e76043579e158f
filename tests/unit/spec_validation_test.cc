#include "common/spec_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <ostream>
#include <string>

#include "common/spec_defaults.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Normalised(const std::string& preset = "debug") {
  v1::JobSpec spec;
  spec.mutable_model()->set_preset(preset);
  absl::Status status = ApplyPresetAndDefaults(&spec);
  EXPECT_TRUE(status.ok()) << status;
  return spec;
}

TEST(SpecValidationTest, PresetsAreValidAndSupported) {
  for (const char* preset : {"debug", "tiny"}) {
    v1::JobSpec spec = Normalised(preset);
    EXPECT_TRUE(ValidateJobSpec(spec, 1).ok()) << preset << ": " << ValidateJobSpec(spec, 1);
    EXPECT_TRUE(CheckSupported(spec).ok()) << preset << ": " << CheckSupported(spec);
  }
}

struct Rule {
  std::string name;
  std::function<void(v1::JobSpec*)> mutate;
  std::string message;  // exact, unless `substring` is set
  bool substring = false;
};
void PrintTo(const Rule& rule, std::ostream* os) { *os << rule.name; }

class ValidationRuleTest : public ::testing::TestWithParam<Rule> {};

TEST_P(ValidationRuleTest, RejectsWithFieldInMessage) {
  const Rule& rule = GetParam();
  v1::JobSpec spec = Normalised();
  rule.mutate(&spec);
  absl::Status status = ValidateJobSpec(spec, 64);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  if (rule.substring) {
    EXPECT_THAT(std::string(status.message()), HasSubstr(rule.message));
  } else {
    EXPECT_EQ(status.message(), rule.message);
  }
}

std::string RuleName(const ::testing::TestParamInfo<Rule>& info) { return info.param.name; }

#define M(body) [](v1::JobSpec* s) { body; }

INSTANTIATE_TEST_SUITE_P(
    Sizes, ValidationRuleTest,
    ::testing::Values(
        Rule{"Dim", M(s->mutable_model()->set_dim(0)), "model.dim must be positive, got 0"},
        Rule{"Vocab", M(s->mutable_model()->set_vocab_size(-3)),
             "model.vocab_size must be positive, got -3"},
        Rule{"Layers", M(s->mutable_model()->set_n_layers(0)),
             "model.n_layers must be positive, got 0"},
        Rule{"Heads", M(s->mutable_model()->set_n_heads(0)),
             "model.n_heads must be positive, got 0"},
        Rule{"KvHeads", M(s->mutable_model()->set_n_kv_heads(0)),
             "model.n_kv_heads must be positive, got 0"},
        Rule{"FfnHidden", M(s->mutable_model()->set_ffn_hidden(0)),
             "model.ffn_hidden must be positive, got 0"},
        Rule{"Experts", M(s->mutable_model()->set_n_routed_experts(0)),
             "model.n_routed_experts must be positive, got 0"},
        Rule{"SharedExperts", M(s->mutable_model()->set_n_shared_experts(-1)),
             "model.n_shared_experts must be >= 0, got -1"},
        Rule{"ExpertHidden", M(s->mutable_model()->set_expert_hidden(0)),
             "model.expert_hidden must be positive, got 0"},
        Rule{"DenseLayersAbove", M(s->mutable_model()->set_n_dense_layers(5)),
             "model.n_dense_layers must be in [0, model.n_layers=4], got 5"},
        Rule{"DenseLayersNegative", M(s->mutable_model()->set_n_dense_layers(-1)),
             "model.n_dense_layers must be in [0, model.n_layers=4], got -1"},
        Rule{"TopKZero", M(s->mutable_model()->set_top_k(0)),
             "model.top_k must be in [1, model.n_routed_experts=8], got 0"},
        Rule{"TopKAbove", M(s->mutable_model()->set_top_k(9)),
             "model.top_k must be in [1, model.n_routed_experts=8], got 9"},
        Rule{"RouteScale", M(s->mutable_model()->set_route_scale(0)),
             "model.route_scale must be positive, got 0"},
        Rule{"RopeTheta", M(s->mutable_model()->set_rope_theta(-1)),
             "model.rope_theta must be positive, got -1"},
        Rule{"NormEps", M(s->mutable_model()->set_norm_eps(0)),
             "model.norm_eps must be positive, got 0"},
        Rule{"LoadBalanceCoeff", M(s->mutable_model()->set_load_balance_coeff(-0.5)),
             "model.load_balance_coeff must be >= 0, got -0.5"},
        Rule{"Steps", M(s->mutable_training()->set_steps(0)),
             "training.steps must be positive, got 0"},
        Rule{"BatchSize", M(s->mutable_training()->set_batch_size(0)),
             "training.batch_size must be positive, got 0"},
        Rule{"SeqLen", M(s->mutable_training()->set_seq_len(-8)),
             "training.seq_len must be positive, got -8"},
        Rule{"Lr", M(s->mutable_training()->set_lr(0)), "training.lr must be positive, got 0"},
        Rule{"Warmup", M(s->mutable_training()->set_warmup_steps(-1)),
             "training.warmup_steps must be >= 0, got -1"},
        Rule{"MaxNorm", M(s->mutable_training()->set_max_norm(0)),
             "training.max_norm must be positive, got 0"},
        Rule{"LogFreq", M(s->mutable_training()->set_log_freq(0)),
             "training.log_freq must be positive, got 0"},
        Rule{"DatasetPathLength",
             M(s->mutable_training()->set_dataset_path(std::string(5000, 'a'))),
             "training.dataset_path is 5000 bytes long, over the limit of 4096"},
        Rule{"Dp", M(s->mutable_parallelism()->set_dp(0)),
             "parallelism.dp must be positive, got 0"},
        Rule{"Tp", M(s->mutable_parallelism()->set_tp(-2)),
             "parallelism.tp must be positive, got -2"},
        Rule{"Ep", M(s->mutable_parallelism()->set_ep(0)),
             "parallelism.ep must be positive, got 0"},
        Rule{"CollectiveTimeout", M(s->mutable_parallelism()->set_collective_timeout_s(0)),
             "parallelism.collective_timeout_s must be positive, got 0"},
        Rule{"RecompileLimit", M(s->mutable_compile()->set_recompile_limit(0)),
             "compile.recompile_limit must be >= 1, got 0"},
        Rule{"SummaryEvery", M(s->mutable_compile()->set_summary_every(0)),
             "compile.summary_every must be >= 1, got 0"},
        Rule{"SummaryEveryNegative", M(s->mutable_compile()->set_summary_every(-5)),
             "compile.summary_every must be >= 1, got -5"},
        Rule{"ProfilingFreq", M(s->mutable_profiling()->set_freq(0)),
             "profiling.freq must be positive, got 0"},
        Rule{"ProfilingWarmup", M(s->mutable_profiling()->set_warmup(-1)),
             "profiling.warmup must be >= 0, got -1"},
        Rule{"ProfilingActive", M(s->mutable_profiling()->set_active(0)),
             "profiling.active must be positive, got 0"},
        Rule{"ProfilingWindow", M(s->mutable_profiling()->set_freq(4)),
             "profiling.warmup + profiling.active must be <= profiling.freq, got 3 + 2 > 4"},
        Rule{"CheckpointInterval", M(s->mutable_checkpoint()->set_interval(-1)),
             "checkpoint.interval must be >= 0, got -1"},
        Rule{"CheckpointKeep", M(s->mutable_checkpoint()->set_keep(-1)),
             "checkpoint.keep must be >= 0, got -1"},
        Rule{"RanksPerWorker", M(s->mutable_resources()->set_ranks_per_worker(-1)),
             "resources.ranks_per_worker must be >= 0, got -1"},
        Rule{"MaxRestarts", M(s->mutable_restart()->set_max_restarts(-1)),
             "restart.max_restarts must be >= 0, got -1"},
        Rule{"Priority", M(s->mutable_job()->set_priority(5000)),
             "job.priority must be in [-1000, 1000], got 5000"},
        Rule{"EmptyName", M(s->mutable_job()->set_name("")),
             "job.name must be 1 to 128 characters long, got 0"},
        Rule{"NameChars", M(s->mutable_job()->set_name("my job")),
             "job.name \"my job\" may contain only letters, digits, '.', '_' and '-'"}),
    RuleName);

INSTANTIATE_TEST_SUITE_P(
    Enums, ValidationRuleTest,
    ::testing::Values(
        Rule{"ScoreFunc", M(s->mutable_model()->set_score_func("relu")),
             "model.score_func: unknown score function \"relu\" (known: sigmoid, softmax)"},
        Rule{"Dataset", M(s->mutable_training()->set_dataset("imagenet")),
             "training.dataset: unknown dataset \"imagenet\" (known: synthetic, text, tokens)"},
        Rule{"Backend", M(s->mutable_compile()->set_backend("fast")),
             "compile.backend: unknown backend \"fast\" (known: eager, jit, cudagraph)"},
        Rule{"Regions", M(s->mutable_compile()->set_regions("all")),
             "compile.regions: unknown regions mode \"all\" (known: per_layer, model)"},
        Rule{"OnSideEffect", M(s->mutable_compile()->set_on_side_effect("ignore")),
             "compile.on_side_effect: unknown policy \"ignore\" (known: error, fallback)"},
        Rule{"AcMode", M(s->mutable_activation_checkpoint()->set_mode("some")),
             "activation_checkpoint.mode: unknown mode \"some\" (known: none, full, selective)"},
        Rule{"Device", M(s->mutable_resources()->set_device("tpu")),
             "resources.device: unknown device \"tpu\" (known: cpu, cuda)"}),
    RuleName);

INSTANTIATE_TEST_SUITE_P(
    Shapes, ValidationRuleTest,
    ::testing::Values(
        Rule{"DimHeads", M(s->mutable_model()->set_dim(250)),
             "model.dim=250 must be divisible by model.n_heads=8"},
        Rule{"HeadsKvHeads", M(s->mutable_model()->set_n_kv_heads(3)),
             "model.n_heads=8 must be divisible by model.n_kv_heads=3", true},
        Rule{"OddHeadDim", M(s->mutable_model()->set_dim(24)),  // 24 / 8 = 3
             "head_dim = model.dim / model.n_heads = 24/8 = 3 must be even", true},
        Rule{"TpHeads", M(s->mutable_parallelism()->set_tp(3)),
             "parallelism.tp=3 must divide model.n_heads=8 and model.n_kv_heads=4"},
        Rule{"TpKvHeads", M(s->mutable_parallelism()->set_tp(8)),
             "parallelism.tp=8 must divide model.n_heads=8 and model.n_kv_heads=4"},
        Rule {
          "TpFfn", M(s->mutable_parallelism()->set_tp(4); s->mutable_model()->set_ffn_hidden(766)),
              "parallelism.tp=4 must divide model.ffn_hidden=766"
        },
        Rule {
          "TpExpertHidden",
              M(s->mutable_parallelism()->set_tp(2); s->mutable_model()->set_expert_hidden(255)),
              "parallelism.tp=2 must divide model.expert_hidden=255"
        },
        Rule {
          "TpSpansWorkers",
              M(s->mutable_parallelism()->set_tp(4);
                s->mutable_resources()->set_ranks_per_worker(2)),
              "parallelism.tp=4 must be at most resources.ranks_per_worker=2", true
        },
        Rule {
          "EpExperts", M(s->mutable_parallelism()->set_ep(3); s->mutable_parallelism()->set_dp(3)),
              "parallelism.ep=3 must divide model.n_routed_experts=8"
        },
        Rule {
          "EpRanks", M(s->mutable_parallelism()->set_ep(4); s->mutable_parallelism()->set_dp(2)),
              "parallelism.ep=4 must divide dp·tp=2"
        },
        Rule{"TextNeedsPath", M(s->mutable_training()->set_dataset("text")),
             "training.dataset_path must be set when training.dataset is \"text\""},
        Rule{"TokensNeedsPath", M(s->mutable_training()->set_dataset("tokens")),
             "training.dataset_path must be set when training.dataset is \"tokens\""}),
    RuleName);

#undef M

TEST(SpecValidationTest, FirstFailureWinsInDocumentedOrder) {
  v1::JobSpec spec = Normalised();
  spec.mutable_compile()->set_backend("fast");  // enum rule
  spec.mutable_parallelism()->set_tp(3);        // parallelism rule
  spec.mutable_model()->set_dim(0);             // size rule: first
  EXPECT_THAT(std::string(ValidateJobSpec(spec, 64).message()), HasSubstr("model.dim"));
  spec.mutable_model()->set_dim(256);
  EXPECT_THAT(std::string(ValidateJobSpec(spec, 64).message()), HasSubstr("compile.backend"));
  spec.mutable_compile()->set_backend("eager");
  EXPECT_THAT(std::string(ValidateJobSpec(spec, 64).message()), HasSubstr("parallelism.tp=3"));
}

TEST(SpecValidationTest, WorldSizeMustFitConnectedSlots) {
  v1::JobSpec spec = Normalised();
  spec.mutable_parallelism()->set_dp(8);
  spec.mutable_parallelism()->set_tp(2);
  absl::Status status = ValidateJobSpec(spec, 4);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("world size dp·tp=16 exceeds the 4 slots of all connected workers"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("parallelism.dp=8"));
  EXPECT_TRUE(ValidateJobSpec(spec, 16).ok());
  EXPECT_TRUE(ValidateJobSpec(spec, kSkipSlotCheck).ok());
  EXPECT_FALSE(ValidateJobSpec(spec, 0).ok());
}

TEST(SpecValidationTest, LegalLayoutsPass) {
  v1::JobSpec spec = Normalised();
  spec.mutable_parallelism()->set_dp(2);
  spec.mutable_parallelism()->set_tp(2);
  spec.mutable_parallelism()->set_ep(4);
  spec.mutable_model()->set_n_dense_layers(4);  // upper bound inclusive: all dense
  spec.mutable_model()->set_top_k(8);           // upper bound inclusive
  spec.mutable_model()->set_n_shared_experts(0);
  spec.mutable_training()->set_dataset("tokens");
  spec.mutable_training()->set_dataset_path("/data/tokens.bin");
  spec.mutable_resources()->set_ranks_per_worker(2);
  EXPECT_TRUE(ValidateJobSpec(spec, 4).ok()) << ValidateJobSpec(spec, 4);
}

struct Unsupported {
  std::string name;
  std::function<void(v1::JobSpec*)> mutate;
  std::string message;
};
void PrintTo(const Unsupported& c, std::ostream* os) { *os << c.name; }

class CheckSupportedTest : public ::testing::TestWithParam<Unsupported> {};

TEST_P(CheckSupportedTest, ValidButNotBuiltIsUnimplemented) {
  const Unsupported& c = GetParam();
  v1::JobSpec spec = Normalised();
  c.mutate(&spec);
  ASSERT_TRUE(ValidateJobSpec(spec, kSkipSlotCheck).ok()) << ValidateJobSpec(spec, kSkipSlotCheck);
  absl::Status status = CheckSupported(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
}

#define M(body) [](v1::JobSpec* s) { body; }
INSTANTIATE_TEST_SUITE_P(
    NotBuilt, CheckSupportedTest,
    ::testing::Values(
        Unsupported{"CudaGraph", M(s->mutable_compile()->set_backend("cudagraph")),
                    "compile.backend=cudagraph: the cudagraph backend needs a CUDA worker"},
        Unsupported{"Profiling", M(s->mutable_profiling()->set_enable(true)),
                    "profiling.enable=true"},
        Unsupported{"CheckpointInterval", M(s->mutable_checkpoint()->set_interval(10)),
                    "checkpoint.interval=10"},
        Unsupported{"InitialLoad", M(s->mutable_checkpoint()->set_initial_load_path("/c")),
                    "checkpoint.initial_load_path"},
        Unsupported{"Cuda", M(s->mutable_resources()->set_device("cuda")), "resources.device=cuda"},
        Unsupported {
          "Text",
              M(s->mutable_training()->set_dataset("text");
                s->mutable_training()->set_dataset_path("/t.txt")),
              "training.dataset=text"
        }),
    [](const ::testing::TestParamInfo<Unsupported>& info) { return info.param.name; });
#undef M

TEST(CheckSupportedTest, CudaGraphSaysWorkersAreCpuOnly) {
  v1::JobSpec spec = Normalised();
  spec.mutable_compile()->set_backend("cudagraph");
  absl::Status status = CheckSupported(spec);
  ASSERT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("CPU-only"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("resources.device=cpu"));
}

struct Built {
  std::string name;
  std::function<void(v1::JobSpec*)> mutate;
};
void PrintTo(const Built& c, std::ostream* os) { *os << c.name; }

class BuiltSettingTest : public ::testing::TestWithParam<Built> {};

// Settings the compile layer now runs: the controller must accept them.
TEST_P(BuiltSettingTest, ValidAndSupported) {
  v1::JobSpec spec = Normalised();
  GetParam().mutate(&spec);
  EXPECT_TRUE(ValidateJobSpec(spec, kSkipSlotCheck).ok()) << ValidateJobSpec(spec, kSkipSlotCheck);
  EXPECT_TRUE(CheckSupported(spec).ok()) << CheckSupported(spec);
}

#define M(body) [](v1::JobSpec* s) { body; }
INSTANTIATE_TEST_SUITE_P(
    CompileLayer, BuiltSettingTest,
    ::testing::Values(
        Built{"Jit", M(s->mutable_compile()->set_backend("jit"))},
        Built{"Eager", M(s->mutable_compile()->set_backend("eager"))},
        Built{"AcFull", M(s->mutable_activation_checkpoint()->set_mode("full"))},
        Built{"AcSelective", M(s->mutable_activation_checkpoint()->set_mode("selective"))},
        Built{"RegionsModel", M(s->mutable_compile()->set_regions("model"))},
        Built{"RegionsPerLayer", M(s->mutable_compile()->set_regions("per_layer"))},
        Built{"JitWithAcAndPreflight",
              M(s->mutable_compile()->set_backend("jit");
                s->mutable_activation_checkpoint()->set_mode("selective");
                s->mutable_compile()->set_preflight(true))},
        Built{"SummaryEveryOne", M(s->mutable_compile()->set_summary_every(1))},
        Built{"PlantedSideEffect", M(s->mutable_compile()->set_test_plant_side_effect(true))}),
    [](const ::testing::TestParamInfo<Built>& info) { return info.param.name; });
#undef M

TEST(CheckSupportedTest, TensorAndExpertParallelLayoutsAreBuilt) {
  v1::JobSpec spec = Normalised();
  spec.mutable_parallelism()->set_dp(2);
  spec.mutable_parallelism()->set_tp(2);
  spec.mutable_parallelism()->set_ep(2);
  ASSERT_TRUE(ValidateJobSpec(spec, kSkipSlotCheck).ok());
  EXPECT_TRUE(CheckSupported(spec).ok()) << CheckSupported(spec);
}

}  // namespace
}  // namespace trainyard
