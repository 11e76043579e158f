// A Hugging Face config.json and the model keys: hostile files, both RoPE forms, the
// round trip of every real preset, and a job file whose initial_load_path is a model
// folder. transformers' own reading of what we write is hf_config_test.py.
#include "common/spec/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/spec/job_file_reader.h"
#include "common/spec/presets.h"

namespace trainyard::spec {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

class HfConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hf_config_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  // The config.json the engine writes for `preset`, as JSON to change.
  static json PresetConfig(const std::string& preset) {
    Result<JobSpec> spec = FromPreset(preset);
    EXPECT_TRUE(spec.ok());
    Result<std::string> text = HuggingFaceConfigJson(spec.value());
    EXPECT_TRUE(text.ok()) << text.error().ToString();
    return json::parse(text.value());
  }
  // The error reading `config`, or "" when it reads.
  std::string ReadError(const json& config) {
    Result<std::vector<HuggingFaceKey>> r = ReadHuggingFaceConfig(Write("config.json", config.dump()));
    return r.ok() ? "" : r.error().ToString();
  }
  static std::map<std::string, FieldValue> AsMap(const std::vector<HuggingFaceKey>& keys) {
    std::map<std::string, FieldValue> out;
    for (const HuggingFaceKey& k : keys) out[k.key] = k.value;
    return out;
  }

  std::string dir_;
};

TEST_F(HfConfigTest, HostileFilesAreRefusedWithTheirProblem) {
  Result<std::vector<HuggingFaceKey>> missing = ReadHuggingFaceConfig(dir_ + "/none/config.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, SpecError::Kind::kNotFound);
  EXPECT_EQ(missing.error().origin, dir_ + "/none/config.json");

  auto error_of = [&](const std::string& text) {
    Result<std::vector<HuggingFaceKey>> r = ReadHuggingFaceConfig(Write("config.json", text));
    return r.ok() ? std::string() : r.error().ToString();
  };
  EXPECT_THAT(error_of(""), HasSubstr("config.json is empty"));
  EXPECT_THAT(error_of(" \n"), HasSubstr("config.json is empty"));
  EXPECT_THAT(error_of(std::string(kMaxHuggingFaceConfigBytes + 1, ' ')), HasSubstr("larger than the limit"));
  EXPECT_THAT(error_of("{\"model_type\": "), HasSubstr("not valid JSON"));
  EXPECT_THAT(error_of("{\"model_type\": \"qwen3_moe\xff\"}"), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(error_of("[1, 2]"), HasSubstr("not a JSON object"));
  EXPECT_THAT(error_of("{\"rms_norm_eps\": NaN}"), HasSubstr("not valid JSON"));
  EXPECT_THAT(error_of("{}"), HasSubstr("config.json has no model_type"));
  // Parsing text directly has the same cap.
  Result<std::vector<HuggingFaceKey>> huge =
      ParseHuggingFaceConfig(std::string(kMaxHuggingFaceConfigBytes + 1, ' '), "x/config.json");
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.error().message, HasSubstr("over the limit"));
}

TEST_F(HfConfigTest, BadFieldsNameTheFieldAndValue) {
  const json qwen = PresetConfig("qwen3_moe_debug");
  const json deepseek = PresetConfig("deepseek_v3_debug");
  ASSERT_EQ(ReadError(qwen), "");
  ASSERT_EQ(ReadError(deepseek), "");
  struct Case {
    const json* base;
    std::string pointer;
    json value;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {&qwen, "/model_type", "llama", "model_type = \"llama\": the engine trains deepseek_v3"},
      {&qwen, "/model_type", 7, "model_type = 7: expected a string"},
      {&qwen, "/hidden_size", "256", "hidden_size = \"256\": expected an integer"},
      {&qwen, "/hidden_size", 256.0, "hidden_size = 256.0: expected an integer"},
      {&qwen, "/hidden_size", -256, "hidden_size = -256: expected an integer from 1"},
      {&qwen, "/hidden_size", 0, "hidden_size = 0: expected an integer from 1"},
      {&qwen, "/vocab_size", 4294967296ULL, "vocab_size = 4294967296: expected an integer from 1 to 2147483647"},
      {&qwen, "/num_hidden_layers", nullptr, "config.json has no num_hidden_layers"},
      {&qwen, "/rms_norm_eps", 0.0, "rms_norm_eps = 0.0: expected a number above 0"},
      {&qwen, "/rms_norm_eps", "1e-6", "rms_norm_eps = \"1e-6\": expected a number"},
      {&qwen, "/norm_topk_prob", 1, "norm_topk_prob = 1: expected true or false"},
      {&qwen, "/tie_word_embeddings", true, "tie_word_embeddings = true"},
      {&qwen, "/attention_bias", true, "attention_bias = true"},
      {&qwen, "/hidden_act", "gelu", "hidden_act = \"gelu\""},
      {&qwen, "/use_sliding_window", true, "use_sliding_window = true"},
      {&qwen, "/decoder_sparse_step", 2, "decoder_sparse_step = 2"},
      {&qwen, "/mlp_only_layers", json::array({1}), "mlp_only_layers = [1]"},
      {&qwen, "/mlp_only_layers", json::array({0, 2}), "mlp_only_layers = [0,2]"},
      {&qwen, "/num_experts", 4, "num_local_experts = 8 differs from num_experts = 4"},
      {&qwen, "/rope_parameters/rope_type", "linear", "rope_parameters.rope_type = \"linear\""},
      {&qwen, "/rope_parameters/rope_type", "yarn", "qwen3_moe has no YaRN"},
      {&qwen, "/rope_parameters/rope_theta", -1.0, "rope_parameters.rope_theta = -1.0: expected a number above 0"},
      {&deepseek, "/rope_interleave", false, "rope_interleave = false"},
      {&deepseek, "/num_key_value_heads", 4, "num_key_value_heads = 4 with num_attention_heads = 8"},
      {&deepseek, "/rope_parameters/mscale", 0.5,
       "rope_parameters.mscale = 0.5 differs from rope_parameters.mscale_all_dim = 1.0"},
      {&deepseek, "/rope_parameters/mscale_all_dim", nullptr, "must both be given"},
      {&deepseek, "/rope_parameters/attention_factor", 1.2, "attention_factor = 1.2"},
      {&deepseek, "/rope_parameters/factor", 0.5, "rope_parameters.factor = 0.5: expected a number above 1"},
      {&deepseek, "/scoring_func", "relu", "scoring_func = \"relu\""},
      {&deepseek, "/first_k_dense_replace", -1, "first_k_dense_replace = -1"},
      {&deepseek, "/q_lora_rank", -3, "q_lora_rank = -3"},
  };
  for (const Case& c : cases) {
    json changed = *c.base;
    changed[json::json_pointer(c.pointer)] = c.value;
    const std::string error = ReadError(changed);
    EXPECT_THAT(error, HasSubstr(c.expected)) << c.pointer << " = " << c.value.dump();
    EXPECT_THAT(error, HasSubstr(dir_ + "/config.json: ")) << c.pointer;
  }
  // A literal past the double range.
  std::string text = qwen.dump();
  const std::string from = "\"rms_norm_eps\":1e-06";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "\"rms_norm_eps\":1e999");
  Result<std::vector<HuggingFaceKey>> r = ReadHuggingFaceConfig(Write("config.json", text));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message, HasSubstr("number overflow parsing '1e999'"));
}

TEST_F(HfConfigTest, EveryRealPresetRoundTrips) {
  for (const std::string preset : {"deepseek_v3_debug", "deepseek_v3_16b", "deepseek_v3_671b", "qwen3_moe_debug",
                                   "qwen3_30b_a3b", "qwen3_235b_a22b"}) {
    SCOPED_TRACE(preset);
    Result<JobSpec> spec = FromPreset(preset);
    ASSERT_TRUE(spec.ok());
    Result<std::string> text = HuggingFaceConfigJson(spec.value());
    ASSERT_TRUE(text.ok()) << text.error().ToString();
    Result<std::vector<HuggingFaceKey>> keys = ParseHuggingFaceConfig(text.value(), preset + "/config.json");
    ASSERT_TRUE(keys.ok()) << keys.error().ToString();
    std::vector<std::string> names;
    for (const HuggingFaceKey& k : keys.value()) {
      names.push_back(k.key);
      const FieldValue ours =
          k.key == "head_dim" ? FieldValue{spec.value().model.head_dim()} : GetField(spec.value(), "model", k.key);
      EXPECT_EQ(ours, k.value) << k.key << " from " << k.hf_field;
    }
    // Every key that shapes the model is among them.
    std::vector<std::string> expected = {
        "vocab_size",    "dim",          "n_layers",         "n_dense_layers",  "n_heads",
        "n_kv_heads",    "ffn_hidden",   "n_routed_experts", "top_k",           "n_shared_experts",
        "expert_hidden", "score_func",   "route_norm",       "route_scale",     "rope_theta",
        "norm_eps",      "architecture", "rope_factor",      "n_expert_groups", "n_limited_groups"};
    if (spec.value().model.mla()) {
      for (const char* k : {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"}) {
        expected.push_back(k);
      }
      for (const char* k : {"original_seq_len", "beta_fast", "beta_slow", "mscale"}) expected.push_back(k);
    } else {
      expected.push_back("head_dim");
    }
    EXPECT_THAT(names, ::testing::UnorderedElementsAreArray(expected));
    // And a resolved job of the preset agrees with what it wrote.
    const std::string folder = dir_ + "/" + preset;
    Write(preset + "/config.json", text.value());
    EXPECT_EQ(CheckAgainstHuggingFaceConfig(folder, spec.value().model), std::nullopt);
  }
}

TEST_F(HfConfigTest, TrainyardArchitectureHasNoConfig) {
  Result<std::string> r = HuggingFaceConfigJson(FromPreset("debug").value());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, SpecError::Kind::kUnimplemented);
  EXPECT_THAT(r.error().message, HasSubstr("has no Hugging Face transformers class"));
  JobSpec qwen = FromPreset("qwen3_moe_debug").value();
  qwen.model.n_shared_experts = 1;
  ASSERT_FALSE(HuggingFaceConfigJson(qwen).ok());
  EXPECT_THAT(HuggingFaceConfigJson(qwen).error().message, HasSubstr("n_shared_experts must be 0"));
}

// The real hub files (transformers 4.x): rope_theta at the top, YaRN in rope_scaling
// under "type", num_experts, no head_dim, q_lora_rank null.
TEST_F(HfConfigTest, ReadsTheOlderTopLevelRopeForm) {
  json deepseek = PresetConfig("deepseek_v3_16b");
  const json rope = deepseek["rope_parameters"];
  deepseek.erase("rope_parameters");
  deepseek["rope_theta"] = 10000;
  deepseek["rope_scaling"] = {{"type", "yarn"},       {"factor", 40},   {"original_max_position_embeddings", 4096},
                              {"beta_fast", 32},      {"beta_slow", 1}, {"mscale", 0.7},
                              {"mscale_all_dim", 0.7}};
  Result<std::vector<HuggingFaceKey>> r = ReadHuggingFaceConfig(Write("config.json", deepseek.dump()));
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  std::map<std::string, FieldValue> keys = AsMap(r.value());
  EXPECT_EQ(keys["rope_theta"], FieldValue{10000.0});
  EXPECT_EQ(keys["rope_factor"], FieldValue{40.0});
  EXPECT_EQ(keys["mscale"], FieldValue{0.7});
  EXPECT_EQ(keys["original_seq_len"], FieldValue{4096});
  EXPECT_EQ(keys["q_lora_rank"], FieldValue{0});
  EXPECT_EQ(keys["score_func"], FieldValue{std::string("softmax")});  // scoring_func, as DeepSeek writes it
  for (const HuggingFaceKey& k : r.value()) {
    if (k.key == "rope_factor") {
      EXPECT_EQ(k.hf_field, "rope_scaling.factor");
    }
  }
  deepseek.erase("scoring_func");
  r = ReadHuggingFaceConfig(Write("config.json", deepseek.dump()));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(AsMap(r.value())["score_func"], FieldValue{std::string("sigmoid")});

  json qwen = PresetConfig("qwen3_30b_a3b");
  qwen.erase("rope_parameters");
  qwen.erase("num_local_experts");
  qwen.erase("head_dim");
  qwen.erase("mlp_only_layers");
  qwen["num_experts"] = 128;
  qwen["rope_theta"] = 1000000.0;
  qwen["rope_scaling"] = nullptr;
  qwen["num_attention_heads"] = 16;  // 2048 / 16 = 128, the width without head_dim
  r = ReadHuggingFaceConfig(Write("config.json", qwen.dump()));
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  keys = AsMap(r.value());
  EXPECT_EQ(keys["n_routed_experts"], FieldValue{128});
  EXPECT_EQ(keys["head_dim"], FieldValue{128});
  EXPECT_EQ(keys["n_dense_layers"], FieldValue{0});
  EXPECT_EQ(keys["rope_factor"], FieldValue{1.0});
  EXPECT_EQ(keys["rope_theta"], FieldValue{1e6});
}

TEST_F(HfConfigTest, JobFileWithAModelFolderIsFilledFromConfigJson) {
  const std::string folder = dir_ + "/Qwen3-mini";
  Write("Qwen3-mini/config.json", PresetConfig("qwen3_moe_debug").dump(2));
  const std::string job =
      Write("job.toml", "[training]\nsteps = 3\n[checkpoint]\ninitial_load_path = \"" + folder + "\"\n");
  Result<SpecInput> input = LoadJobFile(job);
  ASSERT_TRUE(input.ok()) << input.error().ToString();
  const Assignment* dim = input.value().Find("model", "dim");
  ASSERT_NE(dim, nullptr);
  EXPECT_EQ(dim->value, FieldValue{256});
  EXPECT_EQ(dim->origin, folder + "/config.json (hidden_size)");
  EXPECT_EQ(input.value().OriginOf("model.n_dense_layers"), folder + "/config.json (mlp_only_layers)");
  EXPECT_EQ(input.value().Find("model", "preset"), nullptr);
  Result<JobSpec> spec = ResolveAndValidate(input.value());
  ASSERT_TRUE(spec.ok()) << spec.error().ToString();
  EXPECT_EQ(spec.value().model.preset, "debug");
  JobSpec expected = FromPreset("qwen3_moe_debug").value();
  expected.model.preset = "debug";
  // Qwen3's router has no bias: the aux-free one is off unless the job turns it on.
  EXPECT_EQ(spec.value().model.load_balance_coeff, 0.0);
  EXPECT_EQ(input.value().OriginOf("model.load_balance_coeff"),
            folder + "/config.json (Qwen3MoeForCausalLM has no router bias)");
  Result<SpecInput> with_bias = LoadJobFile(job, {"model.load_balance_coeff=1e-3"});
  ASSERT_TRUE(with_bias.ok());
  EXPECT_EQ(with_bias.value().Find("model", "load_balance_coeff")->value, FieldValue{1e-3});
  ForEachField(spec.value(), [&](const char* section, const char* key, const auto& member) {
    if (std::string(section) == "model") {
      EXPECT_EQ(FieldValue{member}, GetField(expected, "model", key)) << key;
    }
  });
  EXPECT_EQ(CheckAgainstHuggingFaceConfig(folder, spec.value().model), std::nullopt);

  // A key the job gives must agree; an override is the job's too.
  Result<SpecInput> agreeing = LoadJobFile(job, {"model.dim=256", "model.norm_eps=1e-6", "model.rope_theta=1e6"});
  ASSERT_TRUE(agreeing.ok()) << agreeing.error().ToString();
  EXPECT_EQ(agreeing.value().OriginOf("model.dim"), "--set model.dim=256");
  const std::string contradicting =
      Write("job2.toml", "[model]\ndim = 512\n[checkpoint]\ninitial_load_path = \"" + folder + "\"\n");
  Result<SpecInput> bad = LoadJobFile(contradicting);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().field, "model.dim");
  EXPECT_THAT(bad.error().message, HasSubstr("model.dim = 512 (" + contradicting + ":2"));
  EXPECT_THAT(bad.error().message, HasSubstr("contradicts hidden_size = 256 in " + folder + "/config.json"));
  Result<SpecInput> bad_set = LoadJobFile(job, {"model.score_func=\"sigmoid\""});
  ASSERT_FALSE(bad_set.ok());
  EXPECT_THAT(bad_set.error().message,
              HasSubstr("model.score_func = \"sigmoid\" (--set model.score_func=\\\"sigmoid\\\") contradicts "
                        "model_type = \"qwen3_moe\" (softmax scores) in " +
                        folder + "/config.json"));

  // A named preset must be the model's.
  EXPECT_TRUE(LoadJobFile(job, {"model.preset=\"qwen3_moe_debug\""}).ok());
  Result<SpecInput> other = LoadJobFile(job, {"model.preset=\"qwen3_30b_a3b\""});
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(other.error().message, HasSubstr("model.preset \"qwen3_30b_a3b\" sets model.vocab_size = 151936, "
                                               "which contradicts vocab_size = 2048 in"));
  // The engine's own checkpoint directory (manifest.json) is not a model folder; nor is
  // a folder without config.json.
  Write("Qwen3-mini/manifest.json", "{}");
  Result<SpecInput> own = LoadJobFile(contradicting);
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own.value().Find("model", "vocab_size"), nullptr);
  EXPECT_FALSE(IsHuggingFaceFolder(folder));
  EXPECT_FALSE(IsHuggingFaceFolder(dir_));
  // A damaged config.json in a model folder is the job's error.
  Write("Broken/config.json", "{\"model_type\": \"qwen3_moe\"");
  Result<SpecInput> broken = LoadJobFile(job, {"checkpoint.initial_load_path=\"" + dir_ + "/Broken\""});
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.error().ToString(), HasSubstr(dir_ + "/Broken/config.json: config.json is not valid JSON"));
}

TEST_F(HfConfigTest, CheckAgainstConfigNamesBothValues) {
  const std::string folder = dir_ + "/ds";
  Write("ds/config.json", PresetConfig("deepseek_v3_debug").dump());
  ModelSpec model = FromPreset("deepseek_v3_debug").value().model;
  EXPECT_EQ(CheckAgainstHuggingFaceConfig(folder, model), std::nullopt);
  model.norm_eps = 1e-6;
  std::optional<SpecError> e = CheckAgainstHuggingFaceConfig(folder, model);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->field, "model.norm_eps");
  EXPECT_THAT(e->message, HasSubstr("model.norm_eps = 1e-06 contradicts rms_norm_eps = 1e-05 in " + folder));
  model = FromPreset("deepseek_v3_debug").value().model;
  model.rope_factor = 1;
  e = CheckAgainstHuggingFaceConfig(folder, model);
  ASSERT_TRUE(e.has_value());
  EXPECT_THAT(e->message, HasSubstr("contradicts rope_parameters.factor = 4.0"));
  EXPECT_TRUE(CheckAgainstHuggingFaceConfig(dir_ + "/nothing", model).has_value());
}

}  // namespace
}  // namespace trainyard::spec
