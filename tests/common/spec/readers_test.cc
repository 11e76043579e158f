// The spec core's readers: JSON (proto3 spellings), --set, presets and defaults, and
// the JSON writer's round trip. TOML files are covered by tests/common/job_file_test.cc,
// which reads them through the same core.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/spec/job_file_reader.h"
#include "common/spec/json_io.h"
#include "common/spec/overrides.h"
#include "common/spec/presets.h"
#include "common/spec/schema.h"

namespace trainyard::spec {
namespace {

using ::testing::HasSubstr;

TEST(PresetsTest, EmptyInputIsTheDebugPresetWithEveryDefault) {
  Result<JobSpec> r = ResolveAndValidate(SpecInput());
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  const JobSpec& s = r.value();
  EXPECT_EQ(s.model.preset, "debug");
  EXPECT_EQ(s.model.vocab_size, 2048);
  EXPECT_EQ(s.model.dim, 256);
  EXPECT_EQ(s.model.n_layers, 4);
  EXPECT_EQ(s.model.n_dense_layers, 1);
  EXPECT_EQ(s.model.n_heads, 8);
  EXPECT_EQ(s.model.n_kv_heads, 4);
  EXPECT_EQ(s.model.ffn_hidden, 768);
  EXPECT_EQ(s.model.n_routed_experts, 8);
  EXPECT_EQ(s.model.top_k, 2);
  EXPECT_EQ(s.model.n_shared_experts, 1);
  EXPECT_EQ(s.model.expert_hidden, 256);
  EXPECT_EQ(s.model.score_func, "sigmoid");
  EXPECT_TRUE(s.model.route_norm);
  EXPECT_DOUBLE_EQ(s.model.rope_theta, 10000.0);
  EXPECT_DOUBLE_EQ(s.model.norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(s.model.load_balance_coeff, 1e-3);
  EXPECT_EQ(s.training.seq_len, 256);
  EXPECT_EQ(s.training.batch_size, 8);
  EXPECT_EQ(s.training.steps, 100);
  EXPECT_DOUBLE_EQ(s.training.lr, 8e-4);
  EXPECT_EQ(s.training.warmup_steps, 10);
  EXPECT_EQ(s.training.seed, 42u);
  EXPECT_EQ(s.training.dataset, "synthetic");
  EXPECT_EQ(s.job.name, "job");
  EXPECT_DOUBLE_EQ(s.parallelism.collective_timeout_s, 300.0);
  EXPECT_EQ(s.parallelism.dp_shard, 1);      // every DP rank a full replica
  EXPECT_EQ(s.parallelism.dp_replicate, 0);  // derived: dp / dp_shard
  EXPECT_EQ(s.compile.backend, "eager");
  EXPECT_EQ(s.compile.regions, "per_layer");
  EXPECT_EQ(s.compile.recompile_limit, 8);
  EXPECT_EQ(s.compile.summary_every, 100);
  EXPECT_EQ(s.activation_checkpoint.mode, "none");
  EXPECT_EQ(s.profiling.freq, 100);
  EXPECT_EQ(s.checkpoint.keep, 3);
  EXPECT_EQ(s.resources.device, "cpu");
  EXPECT_EQ(s.restart.max_restarts, 0);
}

TEST(PresetsTest, TinyPresetAndExplicitKeysWin) {
  Result<JobSpec> r = FromPreset("tiny", {"model.dim=128", "training.steps=3"});
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(r.value().model.preset, "tiny");
  EXPECT_EQ(r.value().model.vocab_size, 256);
  EXPECT_EQ(r.value().model.dim, 128);  // given beats preset
  EXPECT_EQ(r.value().training.seq_len, 32);
  EXPECT_EQ(r.value().training.batch_size, 4);
  EXPECT_EQ(r.value().training.warmup_steps, 3);  // min(10, steps) when not given
}

TEST(PresetsTest, ExplicitWarmupIsKeptAndUnknownPresetNamed) {
  Result<JobSpec> r = FromPreset("tiny", {"training.steps=3", "training.warmup_steps=7"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().training.warmup_steps, 7);
  Result<JobSpec> bad = FromPreset("huge");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().field, "model.preset");
  EXPECT_EQ(bad.error().message,
            "model.preset: unknown preset \"huge\" (known: debug, tiny, gpu_small, deepseek_v3_debug, deepseek_v3_16b, "
            "deepseek_v3_671b, "
            "qwen3_moe_debug, qwen3_30b_a3b, qwen3_235b_a22b)");
}

TEST(JsonTest, WriterRoundTripsEveryField) {
  JobSpec s = FromPreset("tiny", {"model.route_scale=0.1", "job.name=\"r-1\"", "compile.backend=jit",
                                  "parallelism.dp=4", "parallelism.dp_shard=2", "parallelism.dp_replicate=2"})
                  .value();
  s.training.seed = 18446744073709551615u;  // beyond int64: only JSON's string spelling holds it
  const std::string text = ToJson(s);
  EXPECT_THAT(text, HasSubstr("\"seed\":\"18446744073709551615\""));
  EXPECT_THAT(text, HasSubstr("\"dp\":4,\"tp\":1,\"ep\":1,\"dp_shard\":2,\"dp_replicate\":2,"));
  Result<SpecInput> in = ParseJson(text, "spec.json");
  ASSERT_TRUE(in.ok()) << in.error().ToString();
  EXPECT_EQ(in.value().assignments().size(), Fields().size());
  Result<JobSpec> back = ResolveAndValidate(in.value());
  ASSERT_TRUE(back.ok()) << back.error().ToString();
  EXPECT_EQ(ToJson(back.value()), text);
}

TEST(JsonTest, ReadsProto3Spellings) {
  Result<SpecInput> in = ParseJson(
      R"({"training": {"seed": "7", "steps": "12", "lr": "1e-3", "dataset_path": null}, "job": null})", "x.json");
  ASSERT_TRUE(in.ok()) << in.error().ToString();
  ASSERT_NE(in.value().Find("training", "seed"), nullptr);
  EXPECT_EQ(std::get<std::uint64_t>(in.value().Find("training", "seed")->value), 7u);
  EXPECT_EQ(std::get<int>(in.value().Find("training", "steps")->value), 12);
  EXPECT_EQ(in.value().Find("training", "dataset_path"), nullptr);  // null = not set
  // "NaN" is a legal proto3 float spelling, so it reaches the finiteness check.
  Result<SpecInput> nan = ParseJson(R"({"model": {"norm_eps": "NaN"}})", "x.json");
  ASSERT_FALSE(nan.ok());
  EXPECT_EQ(nan.error().ToString(), "x.json: model.norm_eps: expected a finite number, got nan");
}

TEST(JsonTest, HostileDocumentsGetPreciseErrors) {
  struct Bad {
    const char* text;
    const char* field;
    const char* message;
  };
  for (const Bad& b :
       {Bad{R"({"modle": {}})", "modle", "~unknown section [modle] (did you mean model?)"},
        Bad{R"({"model": {"dimm": 3}})", "model.dimm", "unknown key model.dimm (did you mean model.dim?)"},
        Bad{R"({"model": {"dim": 1.5}})", "model.dim", "model.dim: expected integer, got float"},
        Bad{R"({"model": {"dim": "64x"}})", "model.dim", "model.dim: expected integer, got string"},
        Bad{R"({"model": {"dim": 3000000000}})", "model.dim", "~is out of range"},
        Bad{R"({"training": {"seed": -1}})", "training.seed", "~must be a non-negative integer"},
        Bad{R"({"model": {"route_norm": 1}})", "model.route_norm", "model.route_norm: expected boolean, got integer"},
        Bad{R"({"model": {"capacity_factor": "Infinity"}})", "model.capacity_factor",
            "model.capacity_factor: expected a finite number, got inf"},
        Bad{R"({"model": {"capacity_factor": [1]}})", "model.capacity_factor",
            "model.capacity_factor: expected float, got array"},
        Bad{R"({"model": [1]})", "model", "model: expected an object, got array"},
        Bad{R"([1, 2])", "", "expected a JSON object of sections, got array"},
        Bad{R"({"model": )", "", "~not valid JSON"},
        // A float beyond double: the JSON library throws a non-parse error.
        Bad{R"({"model": {"rope_theta": 1e999}})", "", "~not valid JSON"}}) {
    Result<SpecInput> in = ParseJson(b.text, "bad.json");
    ASSERT_FALSE(in.ok()) << b.text;
    EXPECT_EQ(in.error().field, b.field) << b.text;
    EXPECT_EQ(in.error().origin, "bad.json");
    const std::string m = b.message;
    if (m[0] == '~') {
      EXPECT_THAT(in.error().message, HasSubstr(m.substr(1))) << b.text;
    } else {
      EXPECT_EQ(in.error().message, m) << b.text;
    }
  }
}

TEST(JsonTest, ParserErrorsNeverEchoMuchOfTheInput) {
  const std::string token(1 << 20, 'x');  // an unquoted megabyte token
  Result<SpecInput> in = ParseJson("{\"model\": " + token + "}", "big.json");
  ASSERT_FALSE(in.ok());
  EXPECT_LT(in.error().ToString().size(), 400u) << in.error().ToString().substr(0, 400);
  Result<SpecInput> key = ParseJson("{\"" + token + "\": {}}", "big.json");
  ASSERT_FALSE(key.ok());
  EXPECT_LT(key.error().ToString().size(), 400u);
}

TEST(OverrideTest, TypesFollowTheSchema) {
  SpecInput in;
  ASSERT_FALSE(ApplyOverride("training.steps=20", in).has_value());
  ASSERT_FALSE(ApplyOverride("training.lr=1e-3", in).has_value());
  ASSERT_FALSE(ApplyOverride("model.route_norm=false", in).has_value());
  ASSERT_FALSE(ApplyOverride("job.name=123", in).has_value());  // literal for strings
  ASSERT_FALSE(ApplyOverride("model.score_func=\"softmax\"", in).has_value());
  ASSERT_FALSE(ApplyOverride("training.lr=2", in).has_value());  // an integer for a float
  EXPECT_EQ(std::get<int>(in.Find("training", "steps")->value), 20);
  EXPECT_DOUBLE_EQ(std::get<double>(in.Find("training", "lr")->value), 2.0);
  EXPECT_FALSE(std::get<bool>(in.Find("model", "route_norm")->value));
  EXPECT_EQ(std::get<std::string>(in.Find("job", "name")->value), "123");
  EXPECT_EQ(std::get<std::string>(in.Find("model", "score_func")->value), "softmax");
  EXPECT_EQ(in.OriginOf("training.lr"), "--set training.lr=2");
}

TEST(OverrideTest, ErrorsNameTheFlag) {
  SpecInput in;
  struct Bad {
    const char* text;
    const char* message;
  };
  for (const Bad& b :
       {Bad{"training.steps", "--set training.steps: expected section.key=value"},
        Bad{"steps=3", "--set steps: expected section.key=value (e.g. training.steps=20)"},
        Bad{"training.steps=abc", "--set training.steps: expected integer, got string"},
        Bad{"training.lr=inf", "--set training.lr: expected a finite number, got inf"},
        Bad{"model.capacity_factor=nan", "--set model.capacity_factor: expected a finite number, got nan"},
        Bad{"model.capacity_factor=inf", "--set model.capacity_factor: expected a finite number, got inf"},
        Bad{"model.capacity_factor=-inf", "--set model.capacity_factor: expected a finite number, got -inf"},
        Bad{"model.capacity_factor=\"1.5\"", "--set model.capacity_factor: expected float, got string"},
        Bad{"model.capacity_factor=true", "--set model.capacity_factor: expected float, got boolean"},
        Bad{"model.dimm=3", "--set model.dimm: unknown key model.dimm (did you mean model.dim?)"}}) {
    std::optional<SpecError> e = ApplyOverride(b.text, in);
    ASSERT_TRUE(e.has_value()) << b.text;
    EXPECT_EQ(e->ToString(), b.message);
  }
  EXPECT_TRUE(in.assignments().empty());  // nothing half-applied
}

TEST(JobFileReaderTest, MixedPrecisionReadsFromTomlJsonAndSet) {
  // The same key through every reader, and a wrong value named where it came from.
  Result<SpecInput> toml = ParseJobText("[training]\nmixed_precision = \"bf16\"\n", "job.toml");
  ASSERT_TRUE(toml.ok()) << toml.error().ToString();
  EXPECT_EQ(ResolveAndValidate(toml.value()).value().training.mixed_precision, "bf16");
  Result<SpecInput> json = ParseJobText(R"({"training": {"mixed_precision": "bf16"}})", "job.json");
  ASSERT_TRUE(json.ok()) << json.error().ToString();
  EXPECT_EQ(ResolveAndValidate(json.value()).value().training.mixed_precision, "bf16");
  Result<SpecInput> set = ParseJobText("", "empty.toml", {"training.mixed_precision=bf16"});
  ASSERT_TRUE(set.ok()) << set.error().ToString();
  EXPECT_EQ(ResolveAndValidate(set.value()).value().training.mixed_precision, "bf16");
  Result<SpecInput> bad = ParseJobText("[training]\nmixed_precision = \"fp8\"\n", "job.toml");
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(ResolveAndValidate(bad.value()).error().ToString(),
            "job.toml:2:19: training.mixed_precision: unknown value \"fp8\" (known: fp32, bf16)");
  Result<SpecInput> wrong_kind = ParseJobText(R"({"training": {"mixed_precision": 16}})", "job.json");
  EXPECT_FALSE(wrong_kind.ok());
}

TEST(JobFileReaderTest, ChoosesJsonOrTomlAndKeepsPositions) {
  Result<SpecInput> toml = ParseJobText("[training]\n\nlr = 20.0\n", "job.toml");
  ASSERT_TRUE(toml.ok());
  Result<JobSpec> r = ResolveAndValidate(toml.value());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().ToString(), "job.toml:3:6: training.lr must be in (0, 10], got 20");
  Result<SpecInput> json = ParseJobText(R"({"training": {"lr": 20}})", "job.txt");
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(ResolveAndValidate(json.value()).error().ToString(), "job.txt: training.lr must be in (0, 10], got 20");
  Result<SpecInput> over = ParseJobText("", "empty.toml", {"training.lr=20"});
  EXPECT_EQ(ResolveAndValidate(over.value()).error().ToString(),
            "--set training.lr=20: training.lr must be in (0, 10], got 20");
}

}  // namespace
}  // namespace trainyard::spec
