// Every rule of spec::Validate, one case each, with the field, the rule and the message
// written out here (not derived from the code under test).
#include "common/spec/rules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "common/spec/presets.h"
#include "tests/common/spec/rule_case.h"

namespace trainyard::spec {
namespace {

using ::testing::HasSubstr;

using rule_case::Case;
using rule_case::CaseName;
using rule_case::RuleTest;

TEST_P(RuleTest, RefusesNamingFieldAndRule) {
  const Case& c = GetParam();
  Result<JobSpec> spec = FromPreset("debug", c.sets);
  ASSERT_FALSE(spec.ok()) << c.name;
  EXPECT_EQ(spec.error().field, c.field);
  EXPECT_EQ(spec.error().rule, c.rule);
  EXPECT_EQ(spec.error().kind, c.kind);
  const std::string message = c.message;
  if (message[0] == '~') {
    EXPECT_THAT(spec.error().message, HasSubstr(message.substr(1)));
  } else {
    EXPECT_EQ(spec.error().message, message);
  }
  // The error says which --set it came from.
  EXPECT_EQ(spec.error().origin.rfind("--set ", 0), 0u) << spec.error().origin;
}

INSTANTIATE_TEST_SUITE_P(
    Ranges, RuleTest,
    ::testing::Values(
        Case{"LrAboveTen", {"training.lr=20"}, "training.lr", "range", "training.lr must be in (0, 10], got 20"},
        Case{"LrZero", {"training.lr=0"}, "training.lr", "range", "training.lr must be in (0, 10], got 0"},
        Case{"VocabOne",
             {"model.vocab_size=1"},
             "model.vocab_size",
             "range",
             "model.vocab_size must be in [2, 16777216], got 1"},
        Case{"DimZero", {"model.dim=0"}, "model.dim", "range", "model.dim must be in [2, 65536], got 0"},
        Case{"LayersZero",
             {"model.n_layers=0"},
             "model.n_layers",
             "range",
             "model.n_layers must be in [1, 1024], got 0"},
        Case{"DenseAboveLayers",
             {"model.n_dense_layers=5"},
             "model.n_dense_layers",
             "range",
             "model.n_dense_layers must be in [0, model.n_layers=4], got 5"},
        Case{"HeadsAboveDim",
             {"model.n_heads=512"},
             "model.n_heads",
             "range",
             "model.n_heads must be in [1, model.dim=256], got 512"},
        Case{"KvAboveHeads",
             {"model.n_kv_heads=16"},
             "model.n_kv_heads",
             "range",
             "model.n_kv_heads must be in [1, model.n_heads=8], got 16"},
        Case{"FfnZero",
             {"model.ffn_hidden=0"},
             "model.ffn_hidden",
             "range",
             "model.ffn_hidden must be in [1, 1048576], got 0"},
        Case{"ExpertsZero",
             {"model.n_routed_experts=0"},
             "model.n_routed_experts",
             "range",
             "model.n_routed_experts must be in [1, 4096], got 0"},
        Case{"TopKAbove",
             {"model.top_k=9"},
             "model.top_k",
             "range",
             "model.top_k must be in [1, model.n_routed_experts=8], got 9"},
        Case{"SharedNegative",
             {"model.n_shared_experts=-1"},
             "model.n_shared_experts",
             "range",
             "model.n_shared_experts must be in [0, 64], got -1"},
        Case{"RouteScaleZero",
             {"model.route_scale=0"},
             "model.route_scale",
             "range",
             "model.route_scale must be in (0, 1000000], got 0"},
        Case{"RopeThetaBelowOne",
             {"model.rope_theta=0.5"},
             "model.rope_theta",
             "range",
             "model.rope_theta must be in [1, 1000000000000], got 0.5"},
        Case{"NormEpsZero", {"model.norm_eps=0"}, "model.norm_eps", "range", "model.norm_eps must be in (0, 1], got 0"},
        Case{"CoeffNegative",
             {"model.load_balance_coeff=-0.5"},
             "model.load_balance_coeff",
             "range",
             "model.load_balance_coeff must be in [0, 1], got -0.5"},
        Case{"CapacityNegative",
             {"model.capacity_factor=-0.5"},
             "model.capacity_factor",
             "range",
             "model.capacity_factor must be in [0, 1000000], got -0.5"},
        Case{"CapacityHuge",
             {"model.capacity_factor=2e6"},
             "model.capacity_factor",
             "range",
             "model.capacity_factor must be in [0, 1000000], got 2000000"},
        Case{"StepsZero",
             {"training.steps=0"},
             "training.steps",
             "range",
             "training.steps must be in [1, 1000000000], got 0"},
        Case{"BatchNegative",
             {"training.batch_size=-8"},
             "training.batch_size",
             "range",
             "training.batch_size must be in [1, 1048576], got -8"},
        Case{"SeqLenHuge",
             {"training.seq_len=2000000"},
             "training.seq_len",
             "range",
             "training.seq_len must be in [1, 1048576], got 2000000"},
        Case{"WarmupNegative",
             {"training.warmup_steps=-1"},
             "training.warmup_steps",
             "range",
             "training.warmup_steps must be in [0, 1000000000], got -1"},
        Case{"MaxNormZero",
             {"training.max_norm=0"},
             "training.max_norm",
             "range",
             "training.max_norm must be in (0, 1000000000000], got 0"},
        Case{"LogFreqZero",
             {"training.log_freq=0"},
             "training.log_freq",
             "range",
             "training.log_freq must be in [1, 1000000000], got 0"},
        Case{"DpZero", {"parallelism.dp=0"}, "parallelism.dp", "range", "parallelism.dp must be in [1, 65536], got 0"},
        Case{"TpNegative",
             {"parallelism.tp=-2"},
             "parallelism.tp",
             "range",
             "parallelism.tp must be in [1, 65536], got -2"},
        Case{"EpZero", {"parallelism.ep=0"}, "parallelism.ep", "range", "parallelism.ep must be in [1, 65536], got 0"},
        Case{"WorldTooLarge",
             {"parallelism.dp=65536", "parallelism.tp=2"},
             "parallelism.dp",
             "range",
             "parallelism.dp=65536 times parallelism.tp=2 = 131072 ranks, over the limit of 65536"},
        Case{"TimeoutTiny",
             {"parallelism.collective_timeout_s=0.0001"},
             "parallelism.collective_timeout_s",
             "range",
             "parallelism.collective_timeout_s must be in [0.001, 10000000], got 0.0001"},
        Case{"RecompileZero",
             {"compile.recompile_limit=0"},
             "compile.recompile_limit",
             "range",
             "compile.recompile_limit must be in [1, 65536], got 0"},
        Case{"SummaryZero",
             {"compile.summary_every=0"},
             "compile.summary_every",
             "range",
             "compile.summary_every must be in [1, 1000000000], got 0"},
        Case{"PriorityHigh",
             {"job.priority=1001"},
             "job.priority",
             "range",
             "job.priority must be in [-1000, 1000], got 1001"},
        Case{"ProfilingWindow",
             {"profiling.freq=4", "profiling.warmup=3", "profiling.active=2"},
             "profiling.warmup",
             "range",
             "profiling.warmup + profiling.active must be <= profiling.freq, got 3 + 2 > 4"},
        Case{"KeepNegative",
             {"checkpoint.keep=-1"},
             "checkpoint.keep",
             "range",
             "checkpoint.keep must be in [0, 1000000], got -1"},
        Case{"RestartsHigh",
             {"restart.max_restarts=1001"},
             "restart.max_restarts",
             "range",
             "restart.max_restarts must be in [0, 1000], got 1001"},
        Case{"StepTimeoutNegative",
             {"training.step_timeout_s=-1"},
             "training.step_timeout_s",
             "range",
             "training.step_timeout_s must be in [0, 10000000], got -1"},
        Case{"GradAccumZero",
             {"training.grad_accum_steps=0"},
             "training.grad_accum_steps",
             "range",
             "training.grad_accum_steps must be in [1, 1024], got 0"},
        Case{"BackoffNegative",
             {"restart.backoff_s=-1"},
             "restart.backoff_s",
             "range",
             "restart.backoff_s must be in [0, 3600], got -1"},
        Case{"MinDpOverDp",
             {"parallelism.dp=2", "restart.min_dp=3"},
             "restart.min_dp",
             "range",
             "restart.min_dp must be in [0, 2], got 3"},
        Case{"ElasticWaitHigh",
             {"restart.elastic_wait_s=1e6"},
             "restart.elastic_wait_s",
             "range",
             "restart.elastic_wait_s must be in [0, 86400], got 1000000"},
        Case{"CheckpointsWithoutDir",
             {"checkpoint.interval=5"},
             "checkpoint.dir",
             "requires",
             "checkpoint.dir must be set when checkpoint.interval=5 (a path every worker of the job can reach)"},
        Case{"CheckpointDirRelative",
             {"checkpoint.interval=5", "checkpoint.dir=\"ck\""},
             "checkpoint.dir",
             "requires",
             "~must be an absolute path"},
        Case{"CheckpointDirDoubleSlash",
             {"checkpoint.dir=\"/data//ck\""},
             "checkpoint.dir",
             "requires",
             "~must be a plain absolute path"},
        Case{"CheckpointDirDot",
             {"checkpoint.dir=\"/data/./ck\""},
             "checkpoint.dir",
             "requires",
             "~must be a plain absolute path"},
        Case{"CheckpointDirDotDot",
             {"checkpoint.dir=\"/data/x/../ck\""},
             "checkpoint.dir",
             "requires",
             "~must be a plain absolute path"},
        Case{"InitialLoadRelative",
             {"checkpoint.initial_load_path=\"w.safetensors\""},
             "checkpoint.initial_load_path",
             "requires",
             "~must be an absolute path"},
        Case{"InitialLoadDotDot",
             {"checkpoint.initial_load_path=\"/ck/../../etc/w.safetensors\""},
             "checkpoint.initial_load_path",
             "requires",
             "checkpoint.initial_load_path \"/ck/../../etc/w.safetensors\" must be a plain absolute path: no empty, "
             "\".\" or \"..\" components"},
        Case{"DatasetRelative",
             {"training.dataset=\"text\"", "training.dataset_path=\"../corpus.txt\""},
             "training.dataset_path",
             "requires",
             "training.dataset_path \"../corpus.txt\" must be an absolute path (ranks of one job run in different "
             "working directories)"},
        Case{"DatasetDotDot",
             {"training.dataset=\"text\"", "training.dataset_path=\"/data/../etc/passwd\""},
             "training.dataset_path",
             "requires",
             "~must be a plain absolute path"},
        Case{"KeepZeroWithCheckpoints",
             {"checkpoint.interval=5", "checkpoint.dir=\"/ck\"", "checkpoint.keep=0"},
             "checkpoint.keep",
             "requires",
             "checkpoint.keep must be >= 1 when checkpoints are on, got 0"},
        Case{"RanksPerWorkerNegative",
             {"resources.ranks_per_worker=-1"},
             "resources.ranks_per_worker",
             "range",
             "resources.ranks_per_worker must be in [0, 65536], got -1"},
        Case{"KeepBestNegative",
             {"checkpoint.keep_best=-1"},
             "checkpoint.keep_best",
             "range",
             "checkpoint.keep_best must be in [0, 1000000], got -1"},
        Case{"KeepBestHuge",
             {"checkpoint.keep_best=1000001"},
             "checkpoint.keep_best",
             "range",
             "checkpoint.keep_best must be in [0, 1000000], got 1000001"},
        Case{"BestMetricUnknown",
             {"checkpoint.best_metric=\"val_accuracy\""},
             "checkpoint.best_metric",
             "one_of",
             "checkpoint.best_metric: unknown value \"val_accuracy\" (known: val_loss, train_loss)"},
        Case{"BestMetricEmpty",
             {"checkpoint.best_metric=\"\""},
             "checkpoint.best_metric",
             "one_of",
             "checkpoint.best_metric: unknown value \"\" (known: val_loss, train_loss)"},
        Case{"KeepBestWithoutDir",
             {"checkpoint.keep_best=2", "checkpoint.best_metric=\"train_loss\""},
             "checkpoint.keep_best",
             "requires",
             "checkpoint.keep_best=2 needs checkpoint.dir (the checkpoints it keeps are written there)"},
        Case{"KeepBestByValidationWithoutValidation",
             {"checkpoint.interval=5", "checkpoint.dir=\"/ck\"", "checkpoint.keep_best=2"},
             "checkpoint.best_metric",
             "requires",
             "checkpoint.best_metric=\"val_loss\" with checkpoint.keep_best=2 needs validation.dataset; set it, or "
             "rank by best_metric=\"train_loss\""}),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    EnumsAndText, RuleTest,
    ::testing::Values(
        Case{"Backend",
             {"compile.backend=fast"},
             "compile.backend",
             "one_of",
             "compile.backend: unknown value \"fast\" (known: eager, jit, cudagraph)"},
        Case{"ScoreFunc",
             {"model.score_func=relu"},
             "model.score_func",
             "one_of",
             "model.score_func: unknown value \"relu\" (known: sigmoid, softmax)"},
        Case{"Dataset",
             {"training.dataset=web"},
             "training.dataset",
             "one_of",
             "training.dataset: unknown value \"web\" (known: synthetic, text, tokens)"},
        Case{"MixedPrecision",
             {"training.mixed_precision=fp16"},
             "training.mixed_precision",
             "one_of",
             "training.mixed_precision: unknown value \"fp16\" (known: fp32, bf16)"},
        Case{"MixedPrecisionCase",
             {"training.mixed_precision=BF16"},
             "training.mixed_precision",
             "one_of",
             "training.mixed_precision: unknown value \"BF16\" (known: fp32, bf16)"},
        Case{"Regions",
             {"compile.regions=all"},
             "compile.regions",
             "one_of",
             "compile.regions: unknown value \"all\" (known: per_layer, model)"},
        Case{"SideEffect",
             {"compile.on_side_effect=ignore"},
             "compile.on_side_effect",
             "one_of",
             "compile.on_side_effect: unknown value \"ignore\" (known: error, fallback)"},
        Case{"AcMode",
             {"activation_checkpoint.mode=some"},
             "activation_checkpoint.mode",
             "one_of",
             "activation_checkpoint.mode: unknown value \"some\" (known: none, full, selective)"},
        Case{"Device",
             {"resources.device=tpu"},
             "resources.device",
             "one_of",
             "resources.device: unknown value \"tpu\" (known: cpu, cuda)"},
        Case{"NameEmpty", {"job.name=\"\""}, "job.name", "length", "job.name must be 1 to 128 characters long, got 0"},
        Case{"NameSpace",
             {"job.name=\"a b\""},
             "job.name",
             "charset",
             "job.name \"a b\" may contain only letters, digits, '.', '_' and '-'"},
        Case{"PathLong",
             {"training.dataset_path=\"" + std::string(5000, 'a') + "\""},
             "training.dataset_path",
             "length",
             "training.dataset_path is 5000 bytes long, over the limit of 4096"},
        Case{"PathWithNul",
             {"checkpoint.initial_load_path=\"/w\\u0000.bin\""},
             "checkpoint.initial_load_path",
             "charset",
             "checkpoint.initial_load_path \"/w\\x00.bin\" contains a control character"}),
    CaseName);

// model.architecture and its keys (the debug preset is "trainyard"; the MLA cases start
// from the deepseek_v3 debug flavour's keys by --set).
INSTANTIATE_TEST_SUITE_P(
    Architectures, RuleTest,
    ::testing::Values(
        Case{"ArchitectureUnknown",
             {"model.architecture=\"llama\""},
             "model.architecture",
             "one_of",
             "model.architecture: unknown value \"llama\" (known: trainyard, deepseek_v3, qwen3_moe)"},
        Case{"LatentWidthOnGqa",
             {"model.kv_lora_rank=64"},
             "model.kv_lora_rank",
             "requires",
             "model.kv_lora_rank=64 is a multi-head latent attention width: it needs "
             "model.architecture=\"deepseek_v3\" (this job's is \"trainyard\")"},
        Case{"LatentWithoutKvRank",
             {"model.architecture=\"deepseek_v3\"", "model.n_kv_heads=8", "model.kv_lora_rank=0"},
             "model.kv_lora_rank",
             "range",
             "model.kv_lora_rank must be in [1, 65536], got 0"},
        Case{"LatentOddRope",
             {"model.architecture=\"deepseek_v3\"", "model.n_kv_heads=8", "model.kv_lora_rank=64",
              "model.qk_nope_head_dim=32", "model.qk_rope_head_dim=15", "model.v_head_dim=32"},
             "model.qk_rope_head_dim",
             "divides",
             "model.qk_rope_head_dim=15 must be even: RoPE rotates pairs"},
        Case{"LatentKvHeads",
             {"model.architecture=\"deepseek_v3\"", "model.kv_lora_rank=64", "model.qk_nope_head_dim=32",
              "model.qk_rope_head_dim=16", "model.v_head_dim=32"},
             "model.n_kv_heads",
             "requires",
             "~model.n_kv_heads=4 must equal model.n_heads=8 under model.architecture=\"deepseek_v3\""},
        Case{"GroupsDivideExperts",
             {"model.n_expert_groups=3"},
             "model.n_expert_groups",
             "divides",
             "model.n_expert_groups=3 must divide model.n_routed_experts=8"},
        Case{"GroupsOfOne",
             {"model.n_expert_groups=8"},
             "model.n_expert_groups",
             "range",
             "model.n_expert_groups=8 leaves fewer than 2 experts a group (a group scores by its two best experts)"},
        Case{"LimitedGroupsAboveGroups",
             {"model.n_expert_groups=2", "model.n_limited_groups=3"},
             "model.n_limited_groups",
             "range",
             "model.n_limited_groups must be in [1, model.n_expert_groups=2], got 3"},
        Case{"TopKBeyondLimitedGroups",
             {"model.n_expert_groups=4", "model.n_limited_groups=1", "model.top_k=3"},
             "model.top_k",
             "range",
             "model.top_k=3 exceeds the 2 experts of model.n_limited_groups=1 groups"},
        Case{"HeadDimOdd",
             {"model.head_dim=33"},
             "model.head_dim",
             "divides",
             "model.head_dim=33 must be even: RoPE rotates pairs"},
        Case{"HeadDimOnLatent",
             {"model.architecture=\"deepseek_v3\"", "model.head_dim=64"},
             "model.head_dim",
             "requires",
             "~model.head_dim=64 is grouped-query attention's head width"},
        Case{"RopeFactorBelowOne",
             {"model.rope_factor=0.5"},
             "model.rope_factor",
             "range",
             "model.rope_factor must be in [1, 1000000], got 0.5"},
        Case{"BlockRegionsLatent",
             {"model.architecture=\"deepseek_v3\"", "model.n_kv_heads=8", "model.kv_lora_rank=64",
              "model.qk_nope_head_dim=32", "model.qk_rope_head_dim=16", "model.v_head_dim=32",
              "compile.regions=\"model\""},
             "compile.regions",
             "requires",
             "compile.regions=\"model\" is built for model.architecture=\"trainyard\" only; use "
             "compile.regions=\"per_layer\" with \"deepseek_v3\""}),
    CaseName);

TEST(RulesTest, TheDeepSeekV3DebugPresetIsLatentAttentionWithYarnAndGroupedRouting) {
  Result<JobSpec> spec = FromPreset("deepseek_v3_debug");
  ASSERT_TRUE(spec.ok()) << spec.error().ToString();
  const ModelSpec& m = spec.value().model;
  EXPECT_EQ(m.architecture, "deepseek_v3");
  EXPECT_EQ(m.qk_head_dim(), 48);
  EXPECT_EQ(m.rope_head_dim(), 16);
  EXPECT_EQ(m.value_head_dim(), 32);
  EXPECT_GT(m.rope_factor, 1.0);
  EXPECT_GT(spec.value().training.seq_len, m.original_seq_len) << "the preset exercises YaRN past its length";
  EXPECT_EQ(m.n_expert_groups, 4);
  // The default architecture keeps every existing job as it was.
  Result<JobSpec> debug = FromPreset("debug");
  ASSERT_TRUE(debug.ok());
  EXPECT_EQ(debug.value().model.architecture, "trainyard");
  EXPECT_EQ(debug.value().model.rope_factor, 1.0);
  EXPECT_EQ(debug.value().model.n_expert_groups, 1);
}

INSTANTIATE_TEST_SUITE_P(
    CrossField, RuleTest,
    ::testing::Values(
        Case{"DimByHeads",
             {"model.dim=100", "model.n_heads=8"},
             "model.dim",
             "divides",
             "model.dim=100 must be divisible by model.n_heads=8"},
        Case{"HeadsByKv",
             {"model.n_kv_heads=3"},
             "model.n_heads",
             "divides",
             "model.n_heads=8 must be divisible by model.n_kv_heads=3 (grouped-query attention)"},
        Case{"OddHeadDim",
             {"model.dim=24", "model.n_heads=8", "model.n_kv_heads=4"},
             "model.dim",
             "divides",
             "model.dim=24 / model.n_heads=8 = 3 (head_dim) must be even: RoPE rotates pairs"},
        Case{"TpHeads",
             {"parallelism.tp=3"},
             "parallelism.tp",
             "divides",
             "parallelism.tp=3 must divide model.n_heads=8 and model.n_kv_heads=4"},
        Case{"CapacityTpSplitsSequences",
             {"model.capacity_factor=1.25", "parallelism.tp=2", "training.batch_size=3"},
             "model.capacity_factor",
             "requires",
             "model.capacity_factor with parallelism.tp=2 needs training.batch_size=3 divisible by parallelism.tp "
             "(the capacity counts per sequence, and each TP rank routes whole sequences)"},
        Case{"TpFfn",
             {"model.ffn_hidden=766", "parallelism.tp=4"},
             "parallelism.tp",
             "divides",
             "parallelism.tp=4 must divide model.ffn_hidden=766"},
        Case{"TpSharedExpert",
             {"model.expert_hidden=258", "parallelism.tp=4"},
             "parallelism.tp",
             "divides",
             "~model.expert_hidden*model.n_shared_experts=258"},
        Case{"TpRanksPerWorker",
             {"parallelism.tp=4", "resources.ranks_per_worker=2"},
             "parallelism.tp",
             "requires",
             "parallelism.tp=4 must be at most resources.ranks_per_worker=2 (a tensor-parallel group never spans "
             "workers)"},
        Case{"EpExperts",
             {"parallelism.ep=3", "parallelism.dp=3"},
             "parallelism.ep",
             "divides",
             "parallelism.ep=3 must divide model.n_routed_experts=8"},
        Case{"EpWorld",
             {"parallelism.ep=4", "parallelism.dp=2"},
             "parallelism.ep",
             "divides",
             "parallelism.ep=4 must divide dp*tp=2"},
        Case{"DpShardZero",
             {"parallelism.dp_shard=0"},
             "parallelism.dp_shard",
             "range",
             "parallelism.dp_shard must be in [1, 65536], got 0"},
        Case{"DpShardDividesDp",
             {"parallelism.dp=4", "parallelism.dp_shard=3"},
             "parallelism.dp_shard",
             "divides",
             "parallelism.dp_shard=3 must divide parallelism.dp=4 (dp = dp_replicate * dp_shard: the data-parallel "
             "ranks are replicas of dp_shard ranks each)"},
        Case{"DpReplicateNegative",
             {"parallelism.dp=4", "parallelism.dp_replicate=-1"},
             "parallelism.dp_replicate",
             "range",
             "parallelism.dp_replicate must be in [0, 65536], got -1"},
        Case{"DpReplicateMismatch",
             {"parallelism.dp=4", "parallelism.dp_shard=2", "parallelism.dp_replicate=3"},
             "parallelism.dp_replicate",
             "requires",
             "parallelism.dp_replicate=3 times parallelism.dp_shard=2 must equal parallelism.dp=4 (or leave "
             "dp_replicate out: it is dp / dp_shard)"},
        // dp_replicate given without dp_shard: 1 replica-of-one per data rank, so it must be dp.
        Case{"DpReplicateWithoutShard",
             {"parallelism.dp=4", "parallelism.dp_replicate=2"},
             "parallelism.dp_replicate",
             "requires",
             "parallelism.dp_replicate=2 times parallelism.dp_shard=1 must equal parallelism.dp=4 (or leave "
             "dp_replicate out: it is dp / dp_shard)"},
        // A replica is 3 ranks (dp_shard 3 x tp 1): EP groups of 2 would straddle two replicas.
        Case{"EpStraddlesReplicas",
             {"parallelism.dp=6", "parallelism.dp_shard=3", "parallelism.ep=2"},
             "parallelism.ep",
             "divides",
             "parallelism.ep=2 must divide dp_shard*tp=3 or be a multiple of it (parallelism.dp_shard=3: an "
             "expert-parallel group lies inside one replica or covers whole replicas)"},
        // With tp=2 a replica of dp_shard 3 is 6 ranks; ep=4 divides the 12 ranks and the 8
        // experts but neither divides 6 nor is a multiple of it.
        Case{"EpStraddlesTpReplicas",
             {"parallelism.dp=6", "parallelism.dp_shard=3", "parallelism.tp=2", "parallelism.ep=4"},
             "parallelism.ep",
             "divides",
             "parallelism.ep=4 must divide dp_shard*tp=6 or be a multiple of it (parallelism.dp_shard=3: an "
             "expert-parallel group lies inside one replica or covers whole replicas)"},
        Case{"ModelRegionsNeedTp1",
             {"compile.regions=model", "parallelism.tp=2", "compile.backend=jit"},
             "compile.regions",
             "requires",
             "~needs parallelism.tp=1"},
        Case{"SelectiveNeedsPerLayer",
             {"compile.regions=model", "activation_checkpoint.mode=selective"},
             "activation_checkpoint.mode",
             "requires",
             "~needs compile.regions=\"per_layer\""},
        Case{"CudagraphNeedsCuda",
             {"compile.backend=cudagraph"},
             "compile.backend",
             "requires",
             "~needs resources.device=\"cuda\""},
        Case{"CudagraphNeedsWholeWeights",
             {"compile.backend=cudagraph", "resources.device=cuda", "parallelism.dp=2", "parallelism.dp_shard=2"},
             "compile.backend",
             "requires",
             "~needs parallelism.dp_shard=1: FSDP gathers"},
        Case{"FileDatasetNeedsPath",
             {"training.dataset=tokens"},
             "training.dataset_path",
             "requires",
             "training.dataset_path must be set when training.dataset is \"tokens\""},
        Case{"TokensNeedWidth",
             {"training.dataset=tokens", "training.dataset_path=\"/d/x.txt\""},
             "training.dataset_path",
             "requires",
             "~entry \"/d/x.txt\" must end in .u16 or .u32"},
        Case{"TokensSecondEntryDotDot",
             {"training.dataset=tokens", "training.dataset_path=\"/d/a.idx,/d/../b.idx\""},
             "training.dataset_path",
             "requires",
             "~\"/d/../b.idx\" must be a plain absolute path"},
        Case{"TokensEmptyEntry",
             {"training.dataset=tokens", "training.dataset_path=\"/d/a.idx,,/d/b.idx\""},
             "training.dataset_path",
             "requires",
             "~has an empty entry"},
        Case{"TokensTrailingComma",
             {"training.dataset=tokens", "training.dataset_path=\"/d/a.idx,\""},
             "training.dataset_path",
             "requires",
             "~has an empty entry"},
        Case{"SyntheticWithPath",
             {"training.dataset_path=\"/d/a.u16\""},
             "training.dataset_path",
             "requires",
             "training.dataset_path must be empty when training.dataset is \"synthetic\""},
        Case{"ValidationPathWithoutDataset",
             {"validation.dataset_path=\"/d/v.idx\""},
             "validation.dataset_path",
             "requires",
             "validation.dataset_path is set but validation.dataset is not"},
        Case{"ValidationNeedsPath",
             {"validation.dataset=tokens"},
             "validation.dataset_path",
             "requires",
             "validation.dataset_path must be set when validation.dataset is \"tokens\""},
        Case{"ValidationUnknown",
             {"validation.dataset=web"},
             "validation.dataset",
             "one_of",
             "validation.dataset: unknown value \"web\" (known: synthetic, text, tokens)"},
        Case{"ValidationFreqZero", {"validation.freq=0"}, "validation.freq", "range", "~validation.freq"},
        Case{"ValidationStepsZero", {"validation.steps=0"}, "validation.steps", "range", "~validation.steps"},
        Case{"TextNeedsByteVocab",
             {"training.dataset=text", "training.dataset_path=\"/d/a.txt\"", "model.vocab_size=200"},
             "model.vocab_size",
             "requires",
             "~at least 256"}),
    CaseName);

TEST(RulesTest, CheckpointsAndElasticRestartsAreAccepted) {
  Result<JobSpec> spec =
      FromPreset("debug", {"parallelism.dp=2", "checkpoint.interval=5", "checkpoint.dir=\"/ck\"", "checkpoint.keep=1",
                           "checkpoint.initial_load_path=\"/w.safetensors\"", "training.grad_accum_steps=1024",
                           "restart.min_dp=2", "restart.backoff_s=0", "restart.elastic_wait_s=86400"});
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec.value().checkpoint.dir, "/ck");
  for (const char* dir : {"/", "/ck/", "/a/b.c/..d/"}) {
    EXPECT_TRUE(FromPreset("debug", {std::string("checkpoint.dir=\"") + dir + "\""}).ok()) << dir;
  }
  EXPECT_EQ(spec.value().training.grad_accum_steps, 1024);
}

TEST(RulesTest, BestCheckpointsAreAcceptedWithWhatTheyRankBy) {
  Result<JobSpec> by_val = FromPreset("debug", {"checkpoint.interval=5", "checkpoint.dir=\"/ck\"", "checkpoint.keep=1",
                                                "checkpoint.keep_best=1000000", "validation.dataset=synthetic"});
  ASSERT_TRUE(by_val.ok()) << by_val.error().message;
  EXPECT_EQ(by_val.value().checkpoint.keep_best, 1000000);
  EXPECT_EQ(by_val.value().checkpoint.best_metric, "val_loss") << "the default";
  // Training loss needs no validation; interval 0 keeps requested checkpoints only.
  Result<JobSpec> by_train = FromPreset(
      "debug", {"checkpoint.dir=\"/ck\"", "checkpoint.keep_best=3", "checkpoint.best_metric=\"train_loss\""});
  ASSERT_TRUE(by_train.ok()) << by_train.error().message;
  // Off (0, the default) needs nothing, whatever best_metric says.
  EXPECT_TRUE(FromPreset("debug", {"checkpoint.best_metric=\"val_loss\""}).ok());
}

TEST(RulesTest, PresetsAndBoundaryValuesPass) {
  for (const std::string& preset : PresetNames()) {
    EXPECT_TRUE(FromPreset(preset).ok()) << preset;
  }
  // Each bound itself is allowed.
  for (const std::vector<std::string>& sets : std::vector<std::vector<std::string>>{
           {"training.lr=10"},
           {"model.vocab_size=2"},
           {"model.norm_eps=1"},
           {"model.load_balance_coeff=0"},
           {"job.priority=-1000"},
           {"parallelism.collective_timeout_s=0.001"},
           {"restart.max_restarts=1000"},
           {"job.name=\"" + std::string(128, 'n') + "\""},
           {"model.n_dense_layers=4"},  // no MoE layer: experts unused
           {"model.n_dense_layers=0"},  // no dense layer: ffn_hidden need not divide by tp
           {"model.ffn_hidden=3", "model.n_dense_layers=0", "parallelism.tp=2"},
           {"model.n_shared_experts=0", "model.expert_hidden=3", "parallelism.tp=2"},
           {"compile.backend=cudagraph", "resources.device=cuda"},
           {"compile.regions=model", "activation_checkpoint.mode=full", "compile.backend=jit"},
           {"parallelism.dp=2", "parallelism.tp=2", "parallelism.ep=4"},
           {"training.dataset=tokens", "training.dataset_path=\"/d/x.u16\""},
       }) {
    Result<JobSpec> spec = FromPreset("debug", sets);
    EXPECT_TRUE(spec.ok()) << sets[0] << ": " << (spec.ok() ? "" : spec.error().ToString());
  }
}

TEST(RulesTest, ShardedDataParallelLayoutsAreAccepted) {
  // dp_shard divides dp; dp_replicate is 0 (derived) or dp / dp_shard; with dp_shard > 1
  // ep divides dp_shard*tp (a replica's ranks) or is a multiple of it.
  struct Ok {
    std::vector<std::string> sets;
    int dp_shard, dp_replicate;  // as the resolved spec holds them
  };
  for (const Ok& ok : std::vector<Ok>{
           {{"parallelism.dp=4"}, 1, 0},                            // the default: replicated
           {{"parallelism.dp=4", "parallelism.dp_shard=4"}, 4, 0},  // pure FSDP
           {{"parallelism.dp=4", "parallelism.dp_shard=2", "parallelism.dp_replicate=2"}, 2, 2},  // HSDP, given
           {{"parallelism.dp=4", "parallelism.dp_replicate=4"}, 1, 4},                            // 4 replicas of 1
           {{"parallelism.dp=8", "parallelism.dp_shard=8", "parallelism.ep=8"}, 8, 0},            // ep = a replica
           {{"parallelism.dp=8", "parallelism.dp_shard=4", "parallelism.ep=8"}, 4, 0},  // ep covers 2 replicas
           {{"parallelism.dp=4", "parallelism.dp_shard=4", "parallelism.ep=2"}, 4, 0},  // ep inside a replica
           {{"parallelism.dp=4", "parallelism.dp_shard=2", "parallelism.tp=2", "parallelism.ep=4"}, 2, 0},
           {{"parallelism.dp=6", "parallelism.ep=2"}, 1, 0},  // dp_shard 1: the replica rule does not apply
       }) {
    Result<JobSpec> spec = FromPreset("debug", ok.sets);
    ASSERT_TRUE(spec.ok()) << ok.sets.back() << ": " << spec.error().ToString();
    EXPECT_EQ(spec.value().parallelism.dp_shard, ok.dp_shard) << ok.sets.back();
    EXPECT_EQ(spec.value().parallelism.dp_replicate, ok.dp_replicate) << ok.sets.back();
    EXPECT_EQ(spec.value().parallelism.world_size(), spec.value().parallelism.dp * spec.value().parallelism.tp)
        << "dp_shard adds no ranks";
  }
}

TEST(RulesTest, NonFiniteValuesNeverReachTheRules) {
  JobSpec spec = FromPreset("tiny").value();
  spec.training.lr = std::numeric_limits<double>::quiet_NaN();
  std::optional<SpecError> e = Validate(spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->field, "training.lr");
  EXPECT_EQ(e->message, "training.lr must be in (0, 10], got nan");
  spec.training.lr = 1e-3;
  spec.model.rope_theta = std::numeric_limits<double>::infinity();
  e = Validate(spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->field, "model.rope_theta");
}

TEST(RulesTest, CapacityFactorZeroIsDroplessAndAnyPositiveFactorIsACapacity) {
  Result<JobSpec> off = FromPreset("debug");
  ASSERT_TRUE(off.ok()) << off.error().ToString();
  EXPECT_EQ(off.value().model.capacity_factor, 0.0);  // the default: dropless
  for (const char* set : {"model.capacity_factor=0", "model.capacity_factor=1e-6", "model.capacity_factor=1.25",
                          "model.capacity_factor=1000000"}) {
    Result<JobSpec> spec = FromPreset("debug", {set});
    EXPECT_TRUE(spec.ok()) << set << ": " << spec.error().ToString();
  }
  // tp=2 with an even batch: each TP rank's slice is whole sequences.
  Result<JobSpec> tp = FromPreset("debug", {"model.capacity_factor=1", "parallelism.tp=2", "training.batch_size=4"});
  EXPECT_TRUE(tp.ok()) << tp.error().ToString();
  // A NaN set in code (not read from a file) is refused by the range rule.
  JobSpec spec = FromPreset("tiny").value();
  spec.model.capacity_factor = std::numeric_limits<double>::quiet_NaN();
  std::optional<SpecError> e = Validate(spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->field, "model.capacity_factor");
  EXPECT_EQ(e->message, "model.capacity_factor must be in [0, 1000000], got nan");
}

TEST(RulesTest, ProfilingAndStepTimeoutAreAccepted) {
  Result<JobSpec> spec = FromPreset("debug", {"profiling.enable=true", "profiling.freq=5", "profiling.warmup=1",
                                              "profiling.active=2", "training.step_timeout_s=30"});
  ASSERT_TRUE(spec.ok()) << spec.error().ToString();
  EXPECT_TRUE(spec.value().profiling.enable);
  EXPECT_EQ(spec.value().training.step_timeout_s, 30);
}

TEST(RulesTest, MixedPrecisionDefaultsToFp32AndTakesBf16) {
  // The spec core accepts both values on any device: whether bf16 runs is the engine's
  // capability (trainyard-rank --capabilities), checked by the controller and the engine.
  EXPECT_EQ(FromPreset("tiny").value().training.mixed_precision, "fp32");
  for (const char* device : {"cpu", "cuda"}) {
    Result<JobSpec> spec =
        FromPreset("tiny", {"training.mixed_precision=bf16", std::string("resources.device=") + device});
    ASSERT_TRUE(spec.ok()) << spec.error().ToString();
    EXPECT_EQ(spec.value().training.mixed_precision, "bf16");
  }
}

TEST(RulesTest, CudaJobsGetAStepTimeoutByDefault) {
  // Not given: 600 s on CUDA (a hang outside a collective is otherwise invisible there),
  // off on CPU. Given: the value given, 0 included.
  EXPECT_EQ(FromPreset("tiny").value().training.step_timeout_s, 0);
  EXPECT_EQ(FromPreset("tiny", {"resources.device=cpu"}).value().training.step_timeout_s, 0);
  EXPECT_EQ(FromPreset("tiny", {"resources.device=cuda"}).value().training.step_timeout_s, 600);
  EXPECT_EQ(FromPreset("tiny", {"resources.device=cuda", "training.step_timeout_s=0"}).value().training.step_timeout_s,
            0);
  EXPECT_EQ(FromPreset("tiny", {"resources.device=cuda", "training.step_timeout_s=45"}).value().training.step_timeout_s,
            45);
  // The normalised spec (every key given, as the controller stores it and a rank reads
  // it) keeps the default: resolving it again changes nothing.
  const JobSpec cuda = FromPreset("tiny", {"resources.device=cuda"}).value();
  Result<JobSpec> again = Resolve(AllKeys(cuda));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value().training.step_timeout_s, 600);
  // A normalised CPU spec has step_timeout_s=0 given, so it keeps 0 even when its
  // device is changed to cuda afterwards: only a key not given takes the default.
  SpecInput stored = AllKeys(FromPreset("tiny").value());
  ASSERT_FALSE(stored.Set("resources", "device", RawValue{std::string("cuda"), std::nullopt}, "").has_value());
  EXPECT_EQ(Resolve(stored).value().training.step_timeout_s, 0);
}

TEST(RulesTest, HostileTextIsQuotedShortAndEscaped) {
  const std::string huge(1 << 20, 'x');
  Result<JobSpec> spec = FromPreset("debug", {"compile.backend=\"" + huge + "\""});
  ASSERT_FALSE(spec.ok());
  EXPECT_LT(spec.error().ToString().size(), 400u);
  EXPECT_THAT(spec.error().message, HasSubstr("(1048576 bytes)"));

  JobSpec bad = FromPreset("tiny").value();
  bad.job.name = "caf\xc3\xa9\n";  // UTF-8, but a newline
  std::optional<SpecError> e = Validate(bad);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->message, "job.name \"caf\\xc3\\xa9\\x0a\" may contain only letters, digits, '.', '_' and '-'");
}

TEST(RulesTest, EveryTextValueMustBeUtf8) {
  for (const std::string& bytes : {std::string("caf\xc3"), std::string("\xff"), std::string("\xc0\xaf"),
                                   std::string("\xed\xa0\x80"), std::string("\xf4\x90\x80\x80")}) {
    JobSpec bad = FromPreset("tiny").value();
    bad.training.dataset_path = bytes;  // truncated, stray, overlong, surrogate, past U+10FFFF
    std::optional<SpecError> e = Validate(bad);
    ASSERT_TRUE(e.has_value()) << Quote(bytes);
    EXPECT_EQ(e->field, "training.dataset_path");
    EXPECT_EQ(e->rule, "utf8");
  }
  JobSpec good = FromPreset("tiny").value();
  good.training.dataset = "text";
  good.training.dataset_path = "/d/\xc3\xa9t\xc3\xa9/\xf0\x9f\x9a\x82";  // été, a train
  EXPECT_FALSE(Validate(good).has_value());
}

}  // namespace
}  // namespace trainyard::spec
